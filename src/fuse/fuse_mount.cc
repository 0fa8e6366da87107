// Mount/unmount plumbing for FuseServer. See fuse_mount.h.
#include "fuse/fuse_mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/mountinfo.h"

extern char** environ;

namespace granary {
namespace {

constexpr long kFusectlMagic = 0x65735543;
constexpr const char* kFusectlDir = "/sys/fs/fuse/connections";

bool IsListedMountPoint(const std::string& real) {
  for (const MountEntry& e : ReadMountinfo()) {
    if (e.mountpoint == real) return true;
  }
  return false;
}

std::string MountOptions(const FuseOptions& o, uint32_t uid, uint32_t gid, int fd) {
  std::string s;
  if (fd >= 0) {
    s = "fd=" + std::to_string(fd) + ",rootmode=40000,user_id=" + std::to_string(uid) +
        ",group_id=" + std::to_string(gid) + ",";
  }
  s += "default_permissions";
  if (o.allow_other) s += ",allow_other";
  return s;
}

// Receives one fd sent with SCM_RIGHTS on `sock`.
Result<int> ReceiveFd(int sock) {
  char byte = 0;
  iovec iov{.iov_base = &byte, .iov_len = 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return IoError("fusermount did not send the /dev/fuse fd (see its message above)");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
    return IoError("fusermount sent no file descriptor");
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(fd));
  return fd;
}

// Runs `argv` with a minimal environment (PATH, and _FUSE_COMMFD=<commfd>):
// the daemon's own environment may hold AWS_* secrets, which a setuid helper
// has no business seeing. Returns the exit status.
Result<int> RunHelper(const std::vector<std::string>& argv, int commfd) {
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with("PATH=")) env_storage.emplace_back(*e);
  }
  if (env_storage.empty()) env_storage.emplace_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
  if (commfd >= 0) env_storage.push_back("_FUSE_COMMFD=" + std::to_string(commfd));
  std::vector<char*> envp, args;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), envp.data());
  if (rc != 0) return ErrnoStatus("cannot run " + argv[0], rc);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string FusermountBinary() {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/local/bin/"}) {
    for (const char* name : {"fusermount3", "fusermount"}) {
      std::string p = std::string(dir) + name;
      if (access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return "fusermount3";
}

Result<int> MountWithFusermount(const FuseOptions& o, uint32_t uid, uint32_t gid) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return ErrnoStatus("socketpair", errno);
  // sv[0] goes to the helper (inherited: no CLOEXEC); sv[1] stays here.
  fcntl(sv[1], F_SETFD, FD_CLOEXEC);
  std::string opts = std::string(o.writable ? "rw" : "ro") + ",nosuid,nodev," +
                     MountOptions(o, uid, gid, -1) + ",fsname=" + o.fsname + ",subtype=granary";
  Result<int> rc = RunHelper({FusermountBinary(), "-o", opts, "--", o.mountpoint}, sv[0]);
  close(sv[0]);
  if (!rc.ok()) {
    close(sv[1]);
    return rc.status();
  }
  if (*rc != 0) {
    close(sv[1]);
    return IoError(o.mountpoint + ": fusermount failed with exit status " + std::to_string(*rc));
  }
  Result<int> fd = ReceiveFd(sv[1]);
  close(sv[1]);
  return fd;
}

}  // namespace

Status CheckMountpoint(const std::string& path, bool allow_non_empty) {
  if (path.empty()) return InvalidArgument("mount point is empty");
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOTCONN) {
      return InvalidArgument("mount point " + path + " is a dead FUSE mount (run `granary umount " +
                             path + "`)");
    }
    if (err == ENOENT) return NotFound("mount point " + path + " does not exist");
    return ErrnoStatus("mount point " + path, err);
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("mount point " + path + " is not a directory");
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) return ErrnoStatus("realpath " + path, errno);
  struct stat parent;
  std::string up = std::string(real) + "/..";
  bool is_mount =
      IsListedMountPoint(real) || (stat(up.c_str(), &parent) == 0 &&
                                   (parent.st_dev != st.st_dev || parent.st_ino == st.st_ino));
  if (is_mount) {
    return InvalidArgument("mount point " + path +
                           " is already a mount point (another mount is active there; "
                           "unmount it first)");
  }
  if (!allow_non_empty) {
    DIR* d = opendir(real);
    if (d == nullptr) return ErrnoStatus("opendir " + path, errno);
    bool empty = true;
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        empty = false;
        break;
      }
    }
    closedir(d);
    if (!empty) return InvalidArgument("mount point " + path + " is not empty");
  }
  return Status::Ok();
}

Result<int> MountFuse(const FuseOptions& o, uint32_t uid, uint32_t gid) {
  if (geteuid() != 0 || o.force_fusermount) return MountWithFusermount(o, uid, gid);
  int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open /dev/fuse (is the fuse module loaded?)", errno);
  std::string opts = MountOptions(o, uid, gid, fd);
  unsigned long flags = MS_NOSUID | MS_NODEV | (o.writable ? 0 : MS_RDONLY);
  if (mount(o.fsname.c_str(), o.mountpoint.c_str(), "fuse.granary", flags, opts.c_str()) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus("mount " + o.mountpoint, err);
  }
  return fd;
}

Status UnmountFuse(const std::string& mountpoint) {
  if (geteuid() == 0) {
    if (umount2(mountpoint.c_str(), MNT_DETACH) == 0) return Status::Ok();
    int err = errno;
    if (err == EINVAL) return NotFound(mountpoint + " is not a mount point");
    return ErrnoStatus("umount " + mountpoint, err);
  }
  Result<int> rc = RunHelper({FusermountBinary(), "-u", "-z", "--", mountpoint}, -1);
  if (!rc.ok()) return rc.status();
  if (*rc != 0)
    return IoError("fusermount -u -z " + mountpoint + " failed (exit " + std::to_string(*rc) + ")");
  return Status::Ok();
}

Status AbortFuseConnection(dev_t dev) {
  struct statfs sfs;
  bool mounted = statfs(kFusectlDir, &sfs) == 0 && sfs.f_type == kFusectlMagic;
  if (!mounted) {
    if (geteuid() != 0) return Unavailable("fusectl is not mounted at /sys/fs/fuse/connections");
    if (mount("fusectl", kFusectlDir, "fusectl", 0, nullptr) != 0) {
      return ErrnoStatus("mount fusectl on /sys/fs/fuse/connections", errno);
    }
  }
  std::string path = std::string(kFusectlDir) + "/" + std::to_string(minor(dev)) + "/abort";
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  ssize_t n = write(fd, "1", 1);
  int err = errno;
  close(fd);
  if (n != 1) return ErrnoStatus("write " + path, err);
  return Status::Ok();
}

Status SetFuseReadahead(dev_t dev, uint32_t kb) {
  std::string path = "/sys/class/bdi/" + std::to_string(major(dev)) + ":" +
                     std::to_string(minor(dev)) + "/read_ahead_kb";
  std::ofstream out(path);
  if (!out) return ErrnoStatus("open " + path, errno);
  out << kb;
  out.flush();
  if (!out) return IoError("write " + path + " failed");
  return Status::Ok();
}

bool HaveCapSysAdmin() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
      return (caps >> 21) & 1;  // CAP_SYS_ADMIN
    }
  }
  return false;
}

}  // namespace granary
