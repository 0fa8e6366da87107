// ThreadPool: a fixed set of worker threads running submitted tasks in FIFO order.
//
// Used for background work (admissions, readahead) and for serving peer
// requests. Tasks must not throw.
// Shutdown: the destructor (or Stop()) runs every task already queued, then
// joins; Stop(QueuedTasks::kDrop) drops the tasks not yet started instead (a
// server going away), destroying them outside the lock.
// Bounded: with max_queue > 0, TrySubmit() refuses a task (returns false)
// while max_queue tasks wait, so a producer faster than the workers sheds
// work (a flood of peer requests gets quick "busy" answers) instead of
// growing the queue without limit; it also refuses once Stop() was called.
// Submit() always queues.
// Thread safety: Submit(), TrySubmit() and Stop() may be called from any
// thread; Submit() and TrySubmit() also from a task, Stop() never from one.
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
  // What Stop() does with the tasks queued and not yet started.
  enum class QueuedTasks {
    kRun,   // run them all before the workers exit
    kDrop,  // destroy them unrun
  };

  // Starts `threads` workers (at least 1) named `name` (for debuggers).
  // `max_queue`: tasks waiting at most for TrySubmit (0 = no limit).
  explicit ThreadPool(int threads, std::string name = "granary-pool", size_t max_queue = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task` whatever the queue's length. While Stop(kRun) drains, a
  // task may still queue more work, which runs before the workers exit.
  void Submit(std::function<void()> task);

  // Queues `task` unless max_queue tasks are already waiting or Stop() was
  // called; false (and `task` dropped, not run) then.
  [[nodiscard]] bool TrySubmit(std::function<void()> task);

  // Stops taking tasks, runs or drops the queued ones (`queued`), waits for
  // the running ones and joins the workers. Idempotent; the destructor calls
  // Stop(QueuedTasks::kRun).
  void Stop(QueuedTasks queued = QueuedTasks::kRun) EXCLUDES(mu_);

  // Tasks waiting (not running).
  size_t queued() const;

  // Blocks until the queue is empty and no task is running.
  void WaitIdle();

  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void WorkerLoop() EXCLUDES(mu_);

  const size_t max_queue_;  // 0 = unbounded
  mutable Mutex mu_;        // guards queue_, running_, stopping_; a leaf (tasks run without it)
  CondVar cv_;              // signalled when a task is queued or stopping_ is set
  CondVar idle_cv_;         // signalled when the queue drains and no task runs
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
