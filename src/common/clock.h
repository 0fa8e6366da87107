// Clock: the one way Granary code reads time and sleeps, so tests can swap in
// a fake (src/testing/fake_clock.h).
//
// Thread safety: implementations must be thread-safe.
#pragma once

#include <chrono>

namespace granary {

class Clock {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  virtual void SleepFor(Duration d) = 0;
  // Wall-clock seconds since the epoch (for mtimes and timestamps on disk).
  virtual int64_t WallNanos() = 0;

  // The process-wide real clock. Never null; lives forever.
  static Clock* Real();
};

}  // namespace granary
