// RetryPolicy arithmetic: validation, the capped exponential ceiling, and the
// full-jitter draw. See retry.h.
#include "common/retry.h"

#include <string>

namespace granary {

Status RetryPolicy::Validate() const {
  if (max_attempts < 1) {
    return InvalidArgument("retry maxAttempts " + std::to_string(max_attempts) + ": must be >= 1");
  }
  if (base_delay.count() < 0 || max_delay.count() < 0 || max_elapsed.count() < 0) {
    return InvalidArgument("retry delays must not be negative");
  }
  if (max_delay < base_delay) {
    return InvalidArgument("retry max_delay must be >= base_delay");
  }
  return Status::Ok();
}

std::chrono::nanoseconds RetryPolicy::Ceiling(int attempt) const {
  std::chrono::nanoseconds ceiling = base_delay;
  for (int i = 0; i < attempt && ceiling < max_delay; ++i) ceiling *= 2;
  return std::min(ceiling, max_delay);
}

std::chrono::nanoseconds RetryPolicy::Backoff(int attempt, std::mt19937_64& rng) const {
  const int64_t ceiling = Ceiling(attempt).count();
  if (ceiling <= 0) return std::chrono::nanoseconds(0);
  std::uniform_int_distribution<int64_t> dist(0, ceiling);
  return std::chrono::nanoseconds(dist(rng));
}

}  // namespace granary
