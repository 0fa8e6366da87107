// ElasticPool: threads started on demand for work that mostly waits (a
// fetch from a stalled origin, a FUSE read waiting for one), up to
// `max_threads`; a thread idle for `idle_exit` leaves. Unlike ThreadPool it
// never queues work behind a busy thread: TrySubmit() starts a thread or
// hands the task to an idle one, and refuses (false) when `max_threads` are
// all busy, so the caller can serve the task itself.
//
// Stop() and the destructor wait for running tasks: whoever owns the pool makes its
// tasks return (cancels what they wait on) first.
//
// Thread safety: all methods are thread-safe. Threads are detached; the
// last thing one does is to signal the destructor under mu_.
#pragma once

#include <pthread.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "common/mutex.h"

namespace granary {

class ElasticPool {
 public:
  ElasticPool(size_t max_threads, std::string name,
              std::chrono::milliseconds idle_exit = std::chrono::seconds(10))
      : max_threads_(max_threads), name_(std::move(name)), idle_exit_(idle_exit) {}
  ~ElasticPool() { Stop(); }

  // Refuses new tasks and waits for the running ones. Idempotent.
  void Stop() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    stop_ = true;
    work_cv_.NotifyAll();
    done_cv_.Wait(lock, [this]() REQUIRES(mu_) { return threads_ == 0; });
  }
  ElasticPool(const ElasticPool&) = delete;
  ElasticPool& operator=(const ElasticPool&) = delete;

  // Runs `task` on a pool thread. false: max_threads are busy (or the pool
  // is stopping) and `task` was not taken.
  bool TrySubmit(std::function<void()> task) {
    MutexLock lock(mu_);
    if (stop_) return false;
    if (queue_.size() >= idle_) {
      if (threads_ >= max_threads_) return false;
      ++threads_;
      std::thread([this] { Loop(); }).detach();
    } else {
      work_cv_.NotifyOne();
    }
    queue_.push_back(std::move(task));
    return true;
  }

  // Threads running tasks right now.
  size_t busy() const {
    MutexLock lock(mu_);
    return threads_ - idle_;
  }

 private:
  void Loop() EXCLUDES(mu_) {
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    MutexLock lock(mu_);
    for (;;) {
      if (queue_.empty()) {
        ++idle_;
        const bool woken = work_cv_.WaitFor(
            lock, idle_exit_, [this]() REQUIRES(mu_) { return !queue_.empty() || stop_; });
        --idle_;
        if (!woken || queue_.empty()) break;  // idle too long, or stopping with nothing to do
      }
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.Unlock();
      task();
      task = nullptr;
      lock.Lock();
    }
    --threads_;
    done_cv_.NotifyAll();
  }

  const size_t max_threads_;
  const std::string name_;
  const std::chrono::milliseconds idle_exit_;
  mutable Mutex mu_;  // guards the four members below; a leaf lock (tasks run without it)
  CondVar work_cv_;
  CondVar done_cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  size_t threads_ GUARDED_BY(mu_) = 0;  // started and not yet left
  size_t idle_ GUARDED_BY(mu_) = 0;     // of those, waiting for work
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace granary
