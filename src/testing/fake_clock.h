// FakeClock: a Clock whose time moves only when a test (or SleepFor) advances it.
//
// SleepFor advances the fake time immediately and records the requested sleep,
// so retry/backoff code runs instantly and its waits can be asserted.
// Thread safety: thread-safe.
#pragma once

#include <vector>

#include "common/clock.h"
#include "common/mutex.h"

namespace granary::testing {

class FakeClock : public Clock {
 public:
  TimePoint Now() override {
    MutexLock lock(mu_);
    return now_;
  }
  void SleepFor(Duration d) override {
    MutexLock lock(mu_);
    sleeps_.push_back(d);
    now_ += d;
  }
  int64_t WallNanos() override {
    MutexLock lock(mu_);
    return 1'700'000'000'000'000'000 + now_.time_since_epoch().count();
  }
  void Advance(Duration d) {
    MutexLock lock(mu_);
    now_ += d;
  }
  std::vector<Duration> sleeps() {
    MutexLock lock(mu_);
    return sleeps_;
  }

 private:
  Mutex mu_;  // guards now_, sleeps_; a leaf lock
  TimePoint now_ GUARDED_BY(mu_){};
  std::vector<Duration> sleeps_ GUARDED_BY(mu_);
};

}  // namespace granary::testing
