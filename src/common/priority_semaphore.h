// PrioritySemaphore: a counting semaphore with two classes of waiters.
//
// Bounds concurrent origin requests. When a permit frees up, a waiting
// high-priority acquirer (a demand read from an application) always goes
// before a low-priority one (warm-up / prefetch), so a background `granary
// load` never delays training reads by more than one in-flight request.
//
// Thread safety: all methods are thread-safe.
#pragma once

#include <condition_variable>
#include <mutex>

namespace granary {

enum class Priority {
  kHigh,  // demand reads: an application is waiting
  kLow,   // warm-up and readahead
};

class PrioritySemaphore {
 public:
  explicit PrioritySemaphore(int permits) : available_(permits) {}

  void Acquire(Priority p) {
    std::unique_lock lock(mu_);
    if (p == Priority::kHigh) {
      ++high_waiting_;
      cv_.wait(lock, [&] { return available_ > 0; });
      --high_waiting_;
    } else {
      cv_.wait(lock, [&] { return available_ > 0 && high_waiting_ == 0; });
    }
    --available_;
  }

  void Release() {
    {
      std::lock_guard lock(mu_);
      ++available_;
    }
    cv_.notify_all();
  }

  // RAII permit.
  class Permit {
   public:
    Permit(PrioritySemaphore& s, Priority p) : s_(s) { s_.Acquire(p); }
    ~Permit() { s_.Release(); }
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;

   private:
    PrioritySemaphore& s_;
  };

 private:
  std::mutex mu_;  // guards available_, high_waiting_
  std::condition_variable cv_;
  int available_;
  int high_waiting_ = 0;
};

}  // namespace granary
