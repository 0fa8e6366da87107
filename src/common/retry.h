// Retries with jittered exponential backoff ("full jitter": each wait is
// uniform in [0, min(max_delay, base_delay * 2^attempt))).
//
// Only Code::kUnavailable is retried: it is the one code that says "transient,
// trying again may help". Every other error, and success, returns at once.
// No new attempt starts once max_elapsed has passed since the first began, so
// a call whose attempts each run into a timeout T ends within about
// max_elapsed + T however many attempts are allowed.
// Waits go through a Clock so tests run instantly with FakeClock.
//
// Thread safety: RetryPolicy is a value; Retry() is reentrant (the rng is the
// caller's and must not be shared between threads without a lock).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <type_traits>
#include <utility>

#include "common/clock.h"
#include "granary/status.h"

namespace granary {

struct RetryPolicy {
  int max_attempts = 4;  // total tries, first one included (>= 1)
  std::chrono::nanoseconds base_delay = std::chrono::milliseconds(50);  // cap of the first wait
  std::chrono::nanoseconds max_delay = std::chrono::seconds(2);         // cap of every wait
  // No attempt starts later than this after the first one began; 0 = no limit.
  std::chrono::nanoseconds max_elapsed = std::chrono::seconds(120);

  // InvalidArgument naming the field when out of range.
  Status Validate() const;

  // The upper bound of the wait after failed attempt `attempt` (0-based):
  // min(max_delay, base_delay * 2^attempt).
  std::chrono::nanoseconds Ceiling(int attempt) const;

  // A full-jitter wait drawn from [0, Ceiling(attempt)].
  std::chrono::nanoseconds Backoff(int attempt, std::mt19937_64& rng) const;
};

// What Retry() did, for error messages ("after 4 attempts").
struct RetryOutcome {
  int attempts = 0;  // tries made
};

// Calls fn() until it succeeds, fails with a code other than kUnavailable,
// policy.max_attempts tries are spent or policy.max_elapsed has passed; sleeps
// Backoff() on `clock` in between.
// Returns fn's last result. `outcome`, when given, receives the attempt count.
template <typename Fn>
auto Retry(const RetryPolicy& policy, Clock* clock, std::mt19937_64& rng, Fn&& fn,
           RetryOutcome* outcome = nullptr) -> std::invoke_result_t<Fn&> {
  const int attempts = std::max(1, policy.max_attempts);
  const Clock::TimePoint start = clock->Now();
  auto out_of_time = [&] {
    return policy.max_elapsed.count() > 0 && clock->Now() - start >= policy.max_elapsed;
  };
  for (int attempt = 0;; ++attempt) {
    auto result = fn();
    const bool retryable = internal::AsStatus(result).code() == Code::kUnavailable;
    if (!retryable || attempt + 1 >= attempts || out_of_time()) {
      if (outcome != nullptr) outcome->attempts = attempt + 1;
      return result;
    }
    clock->SleepFor(policy.Backoff(attempt, rng));
    if (out_of_time()) {
      if (outcome != nullptr) outcome->attempts = attempt + 1;
      return result;
    }
  }
}

}  // namespace granary
