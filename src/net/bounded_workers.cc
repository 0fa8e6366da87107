// BoundedWorkers (see bounded_workers.h).
#include "net/bounded_workers.h"

#include <pthread.h>

#include <algorithm>

namespace granary::net {

BoundedWorkers::BoundedWorkers(int threads, size_t max_queued, const std::string& name)
    : max_queued_(std::max<size_t>(1, max_queued)) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Loop(); });
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

bool BoundedWorkers::TrySubmit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void BoundedWorkers::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // `dropped` is destroyed here, outside the lock: tasks may own resources.
}

void BoundedWorkers::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // release what the task owns before taking the lock again
    lock.lock();
  }
}

}  // namespace granary::net
