#include "s3_delay_proxy/token_bucket.h"

#include <algorithm>
#include <thread>

namespace granary::bench {

TokenBucket::TokenBucket(uint64_t bytes_per_second, uint64_t burst_bytes)
    : rate_(static_cast<double>(bytes_per_second)),
      burst_(static_cast<double>(burst_bytes)),
      tokens_(static_cast<double>(burst_bytes)),
      last_(Clock::now()) {}

void TokenBucket::Acquire(uint64_t bytes) {
  if (rate_ <= 0) return;
  double wait_s;
  {
    std::lock_guard lock(mu_);
    auto now = Clock::now();
    tokens_ =
        std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
    tokens_ -= static_cast<double>(bytes);
    wait_s = tokens_ < 0 ? -tokens_ / rate_ : 0;
  }
  if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
}

}  // namespace granary::bench
