// BoundedWorkers: a fixed set of threads running tasks from a queue of
// bounded length; a full queue refuses new tasks instead of growing, so a
// flood of peer requests turns into quick "busy" answers, not memory.
//
// Stop() (and the destructor) drops tasks not yet started and joins the
// threads after the running tasks return.
//
// Thread safety: TrySubmit and Stop may be called from any thread; tasks must
// not call Stop.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace granary::net {

class BoundedWorkers {
 public:
  BoundedWorkers(int threads, size_t max_queued, const std::string& name);
  ~BoundedWorkers() { Stop(); }
  BoundedWorkers(const BoundedWorkers&) = delete;
  BoundedWorkers& operator=(const BoundedWorkers&) = delete;

  // Queues `task`; false (task dropped) when the queue is full or stopped.
  bool TrySubmit(std::function<void()> task);
  void Stop();

 private:
  void Loop();

  const size_t max_queued_;
  std::mutex mu_;  // guards queue_, stopping_; a leaf lock
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;  // written only by the constructor and Stop()
};

}  // namespace granary::net
