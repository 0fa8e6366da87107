// AdaptiveLimit (see adaptive_limit.h).
#include "common/adaptive_limit.h"

#include <algorithm>

namespace granary {

AdaptiveLimit::AdaptiveLimit(int initial, int min, int max)
    : min_(std::max(1, min)), max_(std::max(std::max(1, min), max)) {
  limit_ = std::clamp(initial, min_, max_);
}

bool AdaptiveLimit::Acquire(const std::atomic<bool>& stop) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stop.load() || in_flight_ < limit_; });
  if (stop.load()) return false;
  ++in_flight_;
  return true;
}

void AdaptiveLimit::Release(std::chrono::nanoseconds latency, bool measured) {
  {
    std::lock_guard lock(mu_);
    --in_flight_;
    if (measured) {
      ++window_count_;
      window_sum_s_ += std::chrono::duration<double>(latency).count();
      if (window_count_ >= std::max(2 * limit_, 8)) Adjust();
    }
  }
  cv_.notify_all();
}

void AdaptiveLimit::Adjust() {
  const double avg = window_sum_s_ / window_count_;
  window_count_ = 0;
  window_sum_s_ = 0;
  if (avg <= 0) return;
  base_s_ = base_s_ == 0 ? avg : std::min(avg, base_s_);
  const double queue = limit_ * (1.0 - base_s_ / avg);
  if (queue < kGrowBelow) {
    limit_ = std::min(max_, limit_ + std::max(1, limit_ / 4));
  } else if (queue > kShrinkAbove) {
    limit_ = std::max(min_, limit_ - std::max(1, limit_ / 8));
  }
}

void AdaptiveLimit::Wake() {
  { std::lock_guard lock(mu_); }
  cv_.notify_all();
}

int AdaptiveLimit::limit() const {
  std::lock_guard lock(mu_);
  return limit_;
}

int AdaptiveLimit::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

}  // namespace granary
