#include "fuse/close_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/clock.h"
#include "common/log.h"

namespace granary {
namespace {

int MarkMount(int fan, unsigned int add_or_remove, const std::string& mountpoint) {
  return ::fanotify_mark(fan, add_or_remove | FAN_MARK_MOUNT, FAN_CLOSE_NOWRITE, AT_FDCWD,
                         mountpoint.c_str());
}

}  // namespace

Result<std::unique_ptr<CloseWatcher>> CloseWatcher::Start(const std::string& mountpoint,
                                                          double sample, Callbacks callbacks) {
  if (!(sample > 0 && sample <= 1)) {
    return InvalidArgument("close watcher: sample " + std::to_string(sample) + " is not in (0, 1]");
  }
  const int fan =
      ::fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE,
                      O_RDONLY | O_LARGEFILE | O_CLOEXEC);
  if (fan < 0) {
    const int err = errno;
    if (err == EPERM) {
      return PermissionDenied("fanotify_init: needs CAP_SYS_ADMIN (run the daemon as root)");
    }
    if (err == ENOSYS) return Unimplemented("fanotify_init: not in this kernel");
    return ErrnoStatus("fanotify_init", err);
  }
  if (MarkMount(fan, FAN_MARK_ADD, mountpoint) != 0) {
    const int err = errno;
    ::close(fan);
    return ErrnoStatus("fanotify_mark of " + mountpoint, err);
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const int err = errno;
    ::close(fan);
    return ErrnoStatus("eventfd", err);
  }
  callbacks.window_start();  // the first window starts marked
  return std::unique_ptr<CloseWatcher>(
      new CloseWatcher(mountpoint, sample, fan, wake, std::move(callbacks)));
}

CloseWatcher::CloseWatcher(std::string mountpoint, double sample, int fan_fd, int wake_fd,
                           Callbacks callbacks)
    : mountpoint_(std::move(mountpoint)),
      sample_(sample),
      fan_fd_(fan_fd),
      wake_fd_(wake_fd),
      callbacks_(std::move(callbacks)) {
  thread_ = std::thread([this] { Run(); });
}

CloseWatcher::~CloseWatcher() {
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) {
    GLOG_WARN("close watcher: waking the thread failed: errno {}", errno);
  }
  if (thread_.joinable()) thread_.join();
  ::close(fan_fd_);
  ::close(wake_fd_);
}

bool CloseWatcher::Stopped(std::chrono::milliseconds wait) const {
  pollfd p{.fd = wake_fd_, .events = POLLIN, .revents = 0};
  const int n = ::poll(&p, 1, static_cast<int>(wait.count()));
  return n > 0;
}

void CloseWatcher::Run() {
  const bool always = sample_ >= 1;
  const auto on = std::chrono::duration_cast<std::chrono::milliseconds>(kPeriod * sample_);
  Clock* clock = Clock::Real();
  bool marked = true;  // Start marked the mount
  for (;;) {
    if (!marked) {
      if (MarkMount(fan_fd_, FAN_MARK_ADD, mountpoint_) != 0) {
        GLOG_WARN(
            "close watcher: fanotify_mark failed (errno {}); file reads are no longer "
            "counted",
            errno);
        return;
      }
      marked = true;
      callbacks_.window_start();
    }
    const Clock::TimePoint end = clock->Now() + on;
    pollfd fds[2] = {{.fd = fan_fd_, .events = POLLIN, .revents = 0},
                     {.fd = wake_fd_, .events = POLLIN, .revents = 0}};
    for (;;) {
      int timeout = -1;
      if (!always) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(end - clock->Now()).count();
        if (left <= 0) break;
        timeout = static_cast<int>(left);
      }
      if (::poll(fds, 2, timeout) < 0) {
        if (errno == EINTR) continue;
        GLOG_WARN("close watcher: poll failed (errno {}); file reads are no longer counted", errno);
        return;
      }
      if (fds[1].revents != 0) return;
      if (fds[0].revents == 0) continue;
      // Let events gather: while this thread is not waiting in poll, a close
      // queues its event without waking anyone, and one read takes hundreds.
      if (Stopped(kBatchWait)) return;
      if (!Drain()) return;
    }
    // The window ends: closes from now on queue nothing.
    if (MarkMount(fan_fd_, FAN_MARK_REMOVE, mountpoint_) != 0) {
      GLOG_WARN("close watcher: fanotify_mark remove failed (errno {})", errno);
    }
    marked = false;
    if (!Drain()) return;
    if (Stopped(kPeriod - on)) return;
  }
}

bool CloseWatcher::Drain() {
  alignas(fanotify_event_metadata) static thread_local char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fan_fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return true;
      GLOG_WARN("close watcher: read failed (errno {}); file reads are no longer counted", errno);
      return false;
    }
    ssize_t left = n;
    for (auto* m = reinterpret_cast<fanotify_event_metadata*>(buf); FAN_EVENT_OK(m, left);
         m = FAN_EVENT_NEXT(m, left)) {
      if ((m->mask & FAN_Q_OVERFLOW) != 0) {
        overflows_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (m->fd < 0) continue;
      struct stat st {};
      const bool known = ::fstat(m->fd, &st) == 0 && S_ISREG(st.st_mode);
      ::close(m->fd);
      if (!known || (m->mask & FAN_CLOSE_NOWRITE) == 0) continue;
      closes_.fetch_add(1, std::memory_order_relaxed);
      callbacks_.closed(st.st_ino);
    }
  }
}

}  // namespace granary
