// Process plumbing of `granary mount` / `granary umount`: dataset ids, run
// files (pid, stats), the mount table, forking a background daemon that
// reports readiness through a pipe, and stopping a daemon (see daemon.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/mountinfo.h"
#include "common/uri.h"
#include "daemon/daemon.h"
#include "daemon/holder_channel.h"
#include "daemon/mount_holder.h"
#include "fuse/fuse_mount.h"
#include "fuse/fuse_server.h"

namespace granary {
namespace {

// A live process that is not a zombie.
bool ProcessAlive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

}  // namespace

uint64_t ProcessStartTicks(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  // Fields after the command name (which may hold spaces and parentheses):
  // state is field 3, starttime field 22.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

bool PidFileProcessAlive(const DaemonPidInfo& info) {
  if (!ProcessAlive(info.pid)) return false;
  if (info.start_ticks != 0) return ProcessStartTicks(info.pid) == info.start_ticks;
  // An older pid file: the process must at least run this program.
  std::error_code a, b;
  const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(info.pid) + "/exe", a);
  const auto self = std::filesystem::read_symlink("/proc/self/exe", b);
  return !a && !b && exe == self;
}

namespace {

// Writes all of `text` to fd (best effort).
void WriteAllFd(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// The background child: never returns.
[[noreturn]] void RunChild(DaemonOptions options, int ready_fd) {
  ::setsid();
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
  // The log is the daemon user's alone (it names datasets and paths) and its
  // size is capped: log lines go through a rotating sink; stdout
  // and stderr keep pointing at the file for what does not use the logger.
  int log = ::open(options.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log >= 0) {
    ::fchmod(log, 0600);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::close(log);
    if (Status s = LogToFile(options.log_file, kLogFileMaxBytes, kLogFileRotated); !s.ok()) {
      GLOG_WARN("logging to stderr: {}", s.ToString());
    }
  }
  Result<std::unique_ptr<Daemon>> d = Daemon::Start(options);
  if (!d.ok()) {
    GLOG_ERROR("mount {}: {}", options.mountpoint, d.status().ToString());
    WriteAllFd(ready_fd,
               std::to_string(static_cast<int>(d.status().code())) + " " + d.status().message());
    ::close(ready_fd);
    ::_exit(1);
  }
  WriteAllFd(ready_fd, "ready");
  ::close(ready_fd);
  Status s = (*d)->Run();
  d->reset();
  if (!s.ok()) GLOG_ERROR("shutdown: {}", s.ToString());
  ::_exit(s.ok() ? 0 : 1);
}

}  // namespace

Result<DaemonPidInfo> ReadPidFile(std::string_view run_dir, std::string_view mountpoint) {
  std::string path = RunFilePath(run_dir, mountpoint, "pid");
  std::ifstream in(path);
  if (!in) return NotFound("no pid file " + path);
  DaemonPidInfo info;
  std::string pid_line;
  std::getline(in, pid_line);
  std::getline(in, info.mountpoint);
  std::getline(in, info.source);
  try {
    info.pid = static_cast<pid_t>(std::stol(pid_line));
  } catch (...) {
    return Corruption("pid file " + path + ": bad pid '" + pid_line + "'");
  }
  std::string start_line;
  if (std::getline(in, start_line))
    info.start_ticks = std::strtoull(start_line.c_str(), nullptr, 10);
  std::string daemon_line;
  if (std::getline(in, daemon_line)) {
    std::istringstream fields(daemon_line);
    long daemon = 0;
    fields >> daemon >> info.daemon_start_ticks;
    if (!fields.fail() && daemon > 0) info.daemon_pid = static_cast<pid_t>(daemon);
  }
  return info;
}

namespace {

// "fstype source" of the mount at `path` from /proc/self/mountinfo; "" when
// `path` is not a mount point.
std::string MountType(std::string_view path) {
  const std::string want = CanonicalMountpoint(path);
  std::string found;
  for (const MountEntry& e : ReadMountinfo()) {
    if (e.mountpoint == want) found = e.fstype + " " + e.source;  // the last (top) mount wins
  }
  return found;
}

}  // namespace

bool IsMountpoint(std::string_view path) { return !MountType(path).empty(); }

namespace {

// Reads what the background child reports through `fd` ("ready", or "<code>
// <message>") and returns it as a Status; reaps the child when it failed.
Status AwaitReady(int fd, pid_t pid, const std::string& log_file) {
  std::string msg;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (msg == "ready") return Status::Ok();
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (msg.empty()) {
    return Internal("the daemon exited before the mount was ready (see " + log_file + ")");
  }
  size_t space = msg.find(' ');
  int code = std::atoi(msg.substr(0, space).c_str());
  return Status(static_cast<Code>(code), space == std::string::npos ? "" : msg.substr(space + 1));
}

// Sends stdout and stderr to `log_file` and stdin to /dev/null (a background process).
void RedirectToLog(const std::string& log_file) {
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
  int log = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log >= 0) {
    ::fchmod(log, 0600);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::close(log);
  }
}

// This process's command line, as the kernel keeps it.
std::vector<std::string> OwnCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  return argv;
}

// The program this process runs (a path; the file may since have been
// replaced by a newer one, which is what a restart should then run).
std::string OwnBinary() {
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  const std::string kDeleted = " (deleted)";
  if (exe.ends_with(kDeleted)) exe.resize(exe.size() - kDeleted.size());
  return exe;
}

// A daemon a mount holder started: serves, then tells the holder how it ended
// through its exit status. Never returns once the daemon started.
Status RunHeldDaemon(DaemonOptions options, const std::shared_ptr<HolderChannel>& holder) {
  options.holder = holder;
  if (!options.foreground) {
    if (options.log_file.empty()) {
      options.log_file = RunFilePath(options.run_dir, options.mountpoint, "log");
    }
    if (Status s = LogToFile(options.log_file, kLogFileMaxBytes, kLogFileRotated); !s.ok()) {
      GLOG_WARN("logging to stderr: {}", s.ToString());
    }
  }
  Result<std::unique_ptr<Daemon>> d = Daemon::Start(options);
  if (!d.ok()) {
    GLOG_ERROR("mount {}: {}", options.mountpoint, d.status().ToString());
    holder->SendFailed(d.status()).IgnoreError();
    std::fflush(nullptr);
    ::_exit(1);
  }
  if (Status s = holder->SendReady(); !s.ok()) GLOG_WARN("mount holder: {}", s.ToString());
  Status s = (*d)->Run();
  const bool handed_over = (*d)->handed_over();
  d->reset();
  ExitHeldDaemon(s, handed_over);
}

// A granary mount whose connection is gone (ENOTCONN) because its daemon and
// holder died together -- a container killed with SIGKILL or OOM, whose
// preStop hook never ran -- serves nobody and would refuse every new mount
// on its mount point. It is detached (as `umount -l` does), with a warning;
// a live mount, or a dead one of another file system, is left to
// CheckMountpoint's refusal.
Status DetachDeadGranaryMount(const std::string& mp) {
  if (!MountType(mp).starts_with("fuse.granary ")) return Status::Ok();
  // STATFS always reaches the connection (stat may be answered from cached
  // attributes); a dead one fails at once.
  struct statfs sfs {};
  if (::statfs(mp.c_str(), &sfs) == 0 || errno != ENOTCONN) return Status::Ok();
  if (Status s = UnmountFuse(mp); !s.ok()) {
    return s.WithContext("detaching the dead granary mount at " + mp);
  }
  GLOG_WARN(
      "mount point {}: detached a granary mount whose daemon had died (its readers got "
      "ENOTCONN); mounting again",
      mp);
  return Status::Ok();
}

// The holder of `mountpoint` running this process's own command line.
Result<MountHolderOptions> HolderOfThisCommand(const std::string& mountpoint,
                                               const std::string& source,
                                               const std::string& run_dir, bool allow_non_empty) {
  const std::string mp = CanonicalMountpoint(mountpoint);
  if (auto pid = ReadPidFile(run_dir, mp); pid.ok() && PidFileProcessAlive(*pid)) {
    return InvalidArgument("mount point " + mp + " is already served by granary (pid " +
                           std::to_string(pid->pid) + ")");
  }
  RETURN_IF_ERROR(DetachDeadGranaryMount(mp));
  RETURN_IF_ERROR(CheckMountpoint(mp, allow_non_empty));
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  MountHolderOptions h{.binary = OwnBinary(),
                       .argv = OwnCommandLine(),
                       .mountpoint = mp,
                       .source = source,
                       .run_dir = run_dir};
  if (h.binary.empty() || h.argv.empty())
    return Internal("cannot read this process's command line");
  return h;
}

// `granary mount` with a holder: the holder (this process in the
// foreground, a background child otherwise) runs the daemon.
Status LaunchHolder(DaemonOptions options) {
  ASSIGN_OR_RETURN(MountHolderOptions h,
                   HolderOfThisCommand(options.mountpoint, options.dataset.source, options.run_dir,
                                       options.fuse.allow_non_empty));
  if (options.foreground) return RunMountHolder(h);
  if (options.log_file.empty())
    options.log_file = RunFilePath(options.run_dir, h.mountpoint, "log");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    ::close(fds[0]);
    ::setsid();
    RedirectToLog(options.log_file);
    h.ready_fd = fds[1];
    Status s = RunMountHolder(h);
    std::fflush(nullptr);
    ::_exit(s.ok() ? 0 : 1);
  }
  ::close(fds[1]);
  return AwaitReady(fds[0], pid, options.log_file);
}

}  // namespace

void ExitHeldDaemon(const Status& shutdown, bool handed_over) {
  if (!shutdown.ok()) GLOG_ERROR("shutdown: {}", shutdown.ToString());
  std::fflush(nullptr);
  ::_exit(handed_over ? kExitHandedOver : shutdown.ok() ? 0 : 1);
}

Status RunThisCommandUnderMountHolder(const std::string& mountpoint, const std::string& source,
                                      const std::string& run_dir, bool allow_non_empty) {
  ASSIGN_OR_RETURN(MountHolderOptions h,
                   HolderOfThisCommand(mountpoint, source, run_dir, allow_non_empty));
  return RunMountHolder(h);
}

Status LaunchDaemon(DaemonOptions options) {
  ASSIGN_OR_RETURN(std::shared_ptr<HolderChannel> holder, HolderChannel::FromEnvironment());
  if (holder) return RunHeldDaemon(std::move(options), holder);
  if (options.hold_mount && options.fuse.transport == FuseTransport::kUring) {
    // io_uring rings belong to the process that registered them: a new
    // daemon could not take the connection over.
    GLOG_WARN(
        "--fuse-transport uring: this mount ends with its daemon (no restart after a "
        "crash, no --upgrade); the default transport keeps the mount");
    options.hold_mount = false;
  }
  if (!options.mountpoint.empty() && options.hold_mount) {
    RETURN_IF_ERROR(options.Validate());
    return LaunchHolder(std::move(options));
  }
  if (options.foreground) {
    ASSIGN_OR_RETURN(std::unique_ptr<Daemon> d, Daemon::Start(std::move(options)));
    return d->Run();
  }
  RETURN_IF_ERROR(options.Validate());
  if (options.log_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.run_dir, ec);
    options.log_file = RunFilePath(options.run_dir, options.mountpoint, "log");
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    ::close(fds[0]);
    RunChild(std::move(options), fds[1]);
  }
  ::close(fds[1]);
  return AwaitReady(fds[0], pid, options.log_file);
}

Status StopDaemon(std::string_view run_dir, std::string_view mountpoint,
                  std::chrono::seconds timeout) {
  const std::string mp = CanonicalMountpoint(mountpoint);
  Result<DaemonPidInfo> info = ReadPidFile(run_dir, mp);
  const std::string pid_path = RunFilePath(run_dir, mp, "pid");
  if (info.ok() && !PidFileProcessAlive(*info) && info->daemon_pid > 0) {
    // The mount holder is gone (killed) but its daemon may still serve.
    DaemonPidInfo daemon{.pid = info->daemon_pid, .start_ticks = info->daemon_start_ticks};
    if (PidFileProcessAlive(daemon)) {
      info->pid = daemon.pid;
      info->start_ticks = daemon.start_ticks;
    }
  }
  if (info.ok() && !ProcessAlive(info->pid)) {
    // Nothing to signal.
  } else if (info.ok() && !PidFileProcessAlive(*info)) {
    GLOG_WARN(
        "pid file {}: pid {} now belongs to another process (the daemon died); not "
        "signalling it",
        pid_path, info->pid);
  } else if (info.ok()) {
    if (::kill(info->pid, SIGTERM) != 0 && errno != ESRCH) {
      return ErrnoStatus("signal granary daemon pid " + std::to_string(info->pid), errno);
    }
    // Polling an external process with a deadline: it is not our child.
    auto deadline = Clock::Real()->Now() + timeout;
    while (ProcessAlive(info->pid)) {
      if (Clock::Real()->Now() > deadline) {
        return Unavailable("granary daemon pid " + std::to_string(info->pid) +
                           " did not exit within " + std::to_string(timeout.count()) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } else if (!info.ok() && !IsMountpoint(mp)) {
    return NotFound(mp + " is not mounted");
  }
  ::unlink(pid_path.c_str());
  if (std::string type = MountType(mp); !type.empty()) {
    if (!type.starts_with("fuse") || !type.ends_with(" granary")) {
      return InvalidArgument(mp + " is a " + type + " mount, not a granary mount");
    }
    Status s = UnmountFuse(mp);
    if (!s.ok() && s.code() != Code::kNotFound) return s;
  }
  return Status::Ok();
}

}  // namespace granary
