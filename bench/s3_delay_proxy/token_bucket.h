// TokenBucket: caps the byte rate of everything the proxy sends back to its
// clients (one shared link), with a small burst.
//
// Acquire() takes the bytes at once and, when that puts the bucket in debt,
// sleeps until the debt is paid back: callers are served in arrival order of
// their debts and the long-run rate never exceeds the cap.
// Thread safety: thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace granary::bench {

class TokenBucket {
 public:
  // `bytes_per_second` 0 = unlimited.
  TokenBucket(uint64_t bytes_per_second, uint64_t burst_bytes);

  // Blocks as needed so the rate stays under the cap.
  void Acquire(uint64_t bytes);

 private:
  using Clock = std::chrono::steady_clock;
  const double rate_;   // bytes per second
  const double burst_;  // most tokens the bucket holds
  std::mutex mu_;       // guards tokens_, last_
  double tokens_;
  Clock::time_point last_;
};

}  // namespace granary::bench
