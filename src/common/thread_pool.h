// ThreadPool: a fixed set of worker threads running submitted tasks in FIFO order.
//
// Used for background work (admissions, readahead). Tasks must not throw.
// Shutdown (the destructor) runs every task already queued, then joins.
// Bounded: with max_queue > 0, TrySubmit() refuses a task (returns false)
// while max_queue tasks wait, so a producer faster than the workers sheds
// work instead of growing the queue without limit. Submit() always queues.
// Thread safety: Submit() may be called from any thread, including from a task.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace granary {

class ThreadPool {
 public:
  // Starts `threads` workers (at least 1) named `name` (for debuggers).
  // `max_queue`: tasks waiting at most for TrySubmit (0 = no limit).
  explicit ThreadPool(int threads, std::string name = "granary-pool", size_t max_queue = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task` whatever the queue's length.
  void Submit(std::function<void()> task);

  // Queues `task` unless max_queue tasks are already waiting; false (and
  // `task` dropped, not run) when full.
  [[nodiscard]] bool TrySubmit(std::function<void()> task);

  // Tasks waiting (not running).
  size_t queued() const;

  // Blocks until the queue is empty and no task is running.
  void WaitIdle();

  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void WorkerLoop() EXCLUDES(mu_);

  const size_t max_queue_;  // 0 = unbounded
  mutable Mutex mu_;  // guards queue_, running_, stopping_; a leaf (tasks run without it)
  CondVar cv_;        // signalled when a task is queued or stopping_ is set
  CondVar idle_cv_;   // signalled when the queue drains and no task runs
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  int running_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
  std::string name_;
};

// Runs fn(i) for i in [0, n) on up to `parallelism` threads (the caller's
// thread among them) and returns when all are done.
void ParallelFor(size_t n, int parallelism, const std::function<void(size_t)>& fn);

}  // namespace granary
