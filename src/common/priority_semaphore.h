// PrioritySemaphore: a counting semaphore with two classes of waiters.
//
// Bounds concurrent origin requests. When a permit frees up, a waiting
// high-priority acquirer (a demand read from an application) always goes
// before a low-priority one (warm-up / prefetch), so a background `granary
// load` never delays training reads by more than one in-flight request.
//
// Thread safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>

#include "common/cancel.h"
#include "common/mutex.h"

namespace granary {

enum class Priority {
  kHigh,  // demand reads: an application is waiting
  kLow,   // warm-up and readahead
};

class PrioritySemaphore {
 public:
  explicit PrioritySemaphore(int permits) : available_(permits) {}

  // Each release wakes one eligible waiter, never all of them: with 128
  // loader threads on 64 permits, waking every waiter on every release cost
  // the daemon a quarter of its CPU in futex and scheduler work (perf,
  // `granary load --threads 128`, 0 ms origin).
  // A woken acquirer that leaves permits behind wakes the next waiter, so a
  // burst of releases is not lost on waiters that were already signalled.
  void Acquire(Priority p) {
    MutexLock lock(mu_);
    if (p == Priority::kHigh) {
      ++high_waiting_;
      while (available_ == 0) high_cv_.Wait(lock);
      --high_waiting_;
    } else {
      ++low_waiting_;
      while (available_ == 0 || high_waiting_ > 0) {
        // A permit is free but reserved for a high-priority waiter: make
        // sure one of them is awake to take it.
        if (available_ > 0) high_cv_.NotifyOne();
        low_cv_.Wait(lock);
      }
      --low_waiting_;
    }
    --available_;
    if (available_ > 0) WakeOneLocked();
  }

  // Acquire(p) that gives up at `deadline` or when `cancel` (may be null) is
  // cancelled. true: a permit is held (Release() it); false: none is.
  bool AcquireUntil(Priority p, std::chrono::steady_clock::time_point deadline,
                    CancelToken* cancel) {
    CancelToken::Wake wake(cancel, [this] {
      { MutexLock lock(mu_); }
      high_cv_.NotifyAll();
      low_cv_.NotifyAll();
    });
    MutexLock lock(mu_);
    const bool high = p == Priority::kHigh;
    int& waiting = high ? high_waiting_ : low_waiting_;
    ++waiting;
    auto eligible = [&]() REQUIRES(mu_) { return available_ > 0 && (high || high_waiting_ == 0); };
    bool got = false;
    for (;;) {
      if (eligible()) {
        got = true;
        break;
      }
      if (cancel != nullptr && cancel->cancelled()) break;
      if (!high && available_ > 0) high_cv_.NotifyOne();
      if ((high ? high_cv_ : low_cv_).WaitUntil(lock, deadline) == std::cv_status::timeout) {
        got = eligible();
        break;
      }
    }
    --waiting;
    if (got) --available_;
    // A wake-up this waiter consumed and did not use goes to the next one.
    if (available_ > 0) WakeOneLocked();
    return got;
  }

  void Release() {
    MutexLock lock(mu_);
    ++available_;
    WakeOneLocked();
  }

  // Threads blocked in Acquire(p) right now (for tests and gauges).
  int Waiting(Priority p) {
    MutexLock lock(mu_);
    return p == Priority::kHigh ? high_waiting_ : low_waiting_;
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
  void WakeOneLocked() REQUIRES(mu_) {
    if (high_waiting_ > 0) {
      high_cv_.NotifyOne();
    } else if (low_waiting_ > 0) {
      low_cv_.NotifyOne();
    }
  }

  // Guards available_, high_waiting_, low_waiting_. Taken after a
  // CancelToken's mutex (its wake-up takes this one); otherwise a leaf.
  Mutex mu_;
  CondVar high_cv_;
  CondVar low_cv_;
  int available_ GUARDED_BY(mu_);
  int high_waiting_ GUARDED_BY(mu_) = 0;
  int low_waiting_ GUARDED_BY(mu_) = 0;
};

}  // namespace granary
