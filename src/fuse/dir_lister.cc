// DirLister (see dir_lister.h).
#include "fuse/dir_lister.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace granary {
namespace {

constexpr size_t kPathMax = 8192;

// The child: only system calls on memory prepared before the fork (the
// daemon's other threads may hold any lock). One request per line: a path
// relative to the mount; one answer byte each: '1' listed to the end, '0' not.
[[noreturn]] void ChildLoop(int fd, const std::string& mountpoint, char* path, char* in,
                            char* dirents, size_t dirents_size) {
  // Nothing of the daemon's stays open here: above all no /dev/fuse
  // descriptor, which would keep a connection alive that its daemon left.
  if (fd > 0) ::syscall(SYS_close_range, 0u, static_cast<unsigned>(fd - 1), 0u);
  ::syscall(SYS_close_range, static_cast<unsigned>(fd + 1), ~0u, 0u);
  const size_t base = mountpoint.size();
  std::memcpy(path, mountpoint.data(), base);
  size_t have = 0;
  for (;;) {
    char* nl = static_cast<char*>(std::memchr(in, '\n', have));
    if (nl == nullptr) {
      if (have == kPathMax) have = 0;  // a line too long: dropped
      ssize_t n = ::recv(fd, in + have, kPathMax - have, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(0);
      have += static_cast<size_t>(n);
      continue;
    }
    const size_t len = static_cast<size_t>(nl - in);
    char answer = '0';
    if (base + 1 + len < kPathMax) {
      size_t at = base;
      if (len > 0) {
        path[at++] = '/';
        std::memcpy(path + at, in, len);
        at += len;
      }
      path[at] = '\0';
      int dir = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dir >= 0) {
        long n;
        while ((n = ::syscall(SYS_getdents64, dir, dirents, dirents_size)) > 0) {
        }
        ::close(dir);
        if (n == 0) answer = '1';
      }
    }
    std::memmove(in, nl + 1, have - len - 1);
    have -= len + 1;
    while (::send(fd, &answer, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

Result<std::unique_ptr<DirLister>> DirLister::Start(const std::string& mountpoint) {
  if (mountpoint.size() + 2 >= kPathMax) return InvalidArgument("dir lister: mount point too long");
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return ErrnoStatus("dir lister: socketpair", errno);
  }
  // Allocated before the fork: the child must not allocate.
  std::vector<char> path(kPathMax), in(kPathMax), dirents(256 << 10);
  pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return ErrnoStatus("dir lister: fork", err);
  }
  if (pid == 0)
    ChildLoop(fds[1], mountpoint, path.data(), in.data(), dirents.data(), dirents.size());
  ::close(fds[1]);
  return std::unique_ptr<DirLister>(new DirLister(pid, fds[0]));
}

DirLister::~DirLister() {
  ::close(fd_);
  // The child ends as soon as it reads the end of the socket: reap it, but
  // wait at most ~100 ms (one blocked on the mount ends later, unreaped).
  for (int i = 0; i < 20; ++i) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) != 0) return;
    ::usleep(5000);
  }
}

bool DirLister::List(const std::string& rel, const std::function<bool()>& stopped) {
  std::string line = rel + "\n";
  if (line.size() > kPathMax) return false;
  MutexLock lock(request_mu_);
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // the child is gone
    off += static_cast<size_t>(n);
  }
  while (!stopped()) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) continue;
    char answer;
    ssize_t n = ::recv(fd_, &answer, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    return n == 1 && answer == '1';
  }
  return false;
}

}  // namespace granary
