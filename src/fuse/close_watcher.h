// CloseWatcher: counts the files readers finish reading on a mount, including
// the ones the kernel serves wholly from the mount's page cache, which no
// request ever tells the daemon about. It listens to fanotify's
// FAN_CLOSE_NOWRITE events on the mount: a notification, so a reader never
// waits for it, and no request reaches the daemon (the kernel opens the
// event's file for the listener; on a mount answered with "no OPEN, no
// FLUSH" that open and its close are local to the kernel).
//
// For each close it calls `on_close(node)` with the file's inode number
// (the FUSE node id), so the caller can tell whether that reading needed
// bytes from beyond the cache. Directories are not reported.
//
// Counting may be sampled (a share of every period of time), since each
// counted close costs its reader the kernel's event (about 3 us here) and
// the watcher an open and a close of the file.
//
// Needs CAP_SYS_ADMIN (fanotify_init): Start() answers PermissionDenied
// without it, and Unimplemented where fanotify is missing. Events are queued
// without bound (FAN_UNLIMITED_QUEUE); a queue overflow all the same is
// counted (overflows()), not guessed at.
//
// Thread safety: the callback runs on the watcher's own thread; the
// counters may be read from any thread. The destructor stops the thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "granary/status.h"

namespace granary {

class CloseWatcher {
 public:
  struct Callbacks {
    // A reader closed file `node` (its inode number: the FUSE node id).
    std::function<void(uint64_t node)> closed;
    // A counting window starts (closes before it were not seen).
    std::function<void()> window_start;
  };
  // Over every kPeriod, counts closes for the first `sample` of it (0 < sample
  // <= 1; 1 = always): the mount is marked only then, so a close outside a
  // window costs its reader nothing. Both callbacks run on the watcher's
  // thread, window_start first also on this one, before Start returns.
  static Result<std::unique_ptr<CloseWatcher>> Start(const std::string& mountpoint, double sample,
                                                     Callbacks callbacks);
  ~CloseWatcher();
  CloseWatcher(const CloseWatcher&) = delete;
  CloseWatcher& operator=(const CloseWatcher&) = delete;

  // Files closed after reading (no write) seen since Start.
  uint64_t closes() const { return closes_.load(std::memory_order_relaxed); }
  // Times the kernel reported lost events (FAN_Q_OVERFLOW).
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

  static constexpr std::chrono::milliseconds kPeriod{1000};

 private:
  // After the first event of a batch, how long the thread lets more gather.
  static constexpr std::chrono::milliseconds kBatchWait{20};
  CloseWatcher(std::string mountpoint, double sample, int fan_fd, int wake_fd, Callbacks callbacks);
  void Run();
  // Reads every queued event; false on an error that ends the counting.
  bool Drain();
  // Waits up to `wait` for the destructor's stop; true when it came.
  bool Stopped(std::chrono::milliseconds wait) const;

  const std::string mountpoint_;
  const double sample_;
  const int fan_fd_;
  const int wake_fd_;  // eventfd: the destructor's stop
  const Callbacks callbacks_;
  std::atomic<uint64_t> closes_{0}, overflows_{0};
  std::thread thread_;
};

}  // namespace granary
