// FakeClock: a Clock whose time moves only when a test (or SleepFor) advances it.
//
// SleepFor advances the fake time immediately and records the requested sleep,
// so retry/backoff code runs instantly and its waits can be asserted.
// Thread safety: thread-safe.
#pragma once

#include <mutex>
#include <vector>

#include "common/clock.h"

namespace granary::testing {

class FakeClock : public Clock {
 public:
  TimePoint Now() override {
    std::lock_guard lock(mu_);
    return now_;
  }
  void SleepFor(Duration d) override {
    std::lock_guard lock(mu_);
    sleeps_.push_back(d);
    now_ += d;
  }
  int64_t WallNanos() override {
    std::lock_guard lock(mu_);
    return 1'700'000'000'000'000'000 + now_.time_since_epoch().count();
  }
  void Advance(Duration d) {
    std::lock_guard lock(mu_);
    now_ += d;
  }
  std::vector<Duration> sleeps() {
    std::lock_guard lock(mu_);
    return sleeps_;
  }

 private:
  std::mutex mu_;  // guards now_, sleeps_
  TimePoint now_{};
  std::vector<Duration> sleeps_;
};

}  // namespace granary::testing
