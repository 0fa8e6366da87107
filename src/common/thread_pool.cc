#include "common/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>

namespace granary {

ThreadPool::ThreadPool(int threads, std::string name, size_t max_queue)
    : max_queue_(max_queue), name_(std::move(name)) {
  threads = std::max(1, threads);
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
    pthread_setname_np(workers_.back().native_handle(), name_.substr(0, 15).c_str());
  }
}

ThreadPool::~ThreadPool() { Stop(QueuedTasks::kRun); }

void ThreadPool::Stop(QueuedTasks queued) {
  std::deque<std::function<void()>> dropped;
  {
    MutexLock lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    if (queued == QueuedTasks::kDrop) dropped.swap(queue_);
  }
  cv_.NotifyAll();
  for (auto& t : workers_) t.join();
  workers_.clear();
  // `dropped` is destroyed here, outside the lock: tasks may own resources.
}

void ThreadPool::Submit(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.NotifyOne();
}

bool ThreadPool::TrySubmit(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (stopping_ || (max_queue_ > 0 && queue_.size() >= max_queue_)) return false;
    queue_.push_back(std::move(task));
  }
  cv_.NotifyOne();
  return true;
}

size_t ThreadPool::queued() const {
  MutexLock lock(mu_);
  return queue_.size();
}

void ThreadPool::WaitIdle() {
  MutexLock lock(mu_);
  idle_cv_.Wait(lock, [this]() REQUIRES(mu_) { return queue_.empty() && running_ == 0; });
}

void ThreadPool::WorkerLoop() {
  MutexLock lock(mu_);
  for (;;) {
    cv_.Wait(lock, [this]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    auto task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.Unlock();
    task();
    task = nullptr;  // release what the task owns before taking the lock again
    lock.Lock();
    --running_;
    if (queue_.empty() && running_ == 0) idle_cv_.NotifyAll();
  }
}

void ParallelFor(size_t n, int parallelism, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  size_t threads = std::min<size_t>(n, static_cast<size_t>(std::max(1, parallelism)));
  std::atomic<size_t> next{0};
  auto body = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> extra;
  extra.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) extra.emplace_back(body);
  body();
  for (auto& t : extra) t.join();
}

}  // namespace granary
