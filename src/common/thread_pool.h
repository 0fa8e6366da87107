// ThreadPool: a fixed set of worker threads running submitted tasks in FIFO order.
//
// Used for background work (listing, eviction, warm-up). Tasks must not throw.
// Shutdown (the destructor) runs every task already queued, then joins.
// Thread safety: Submit() may be called from any thread, including from a task.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace granary {

class ThreadPool {
 public:
  // Starts `threads` workers (at least 1) named `name` (for debuggers).
  explicit ThreadPool(int threads, std::string name = "granary-pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task);

  // Blocks until the queue is empty and no task is running.
  void WaitIdle();

  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void WorkerLoop();

  std::mutex mu_;  // guards queue_, running_, stopping_
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  int running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  std::string name_;
};

// Runs fn(i) for i in [0, n) on up to `parallelism` threads (the caller's
// thread among them) and returns when all are done.
void ParallelFor(size_t n, int parallelism, const std::function<void(size_t)>& fn);

}  // namespace granary
