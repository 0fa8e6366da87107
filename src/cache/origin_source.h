// OriginSource: the last block source -- ranged GETs to the under storage.
//
// Holds the origin's concurrency bound (a PrioritySemaphore of
// origin_concurrency permits: demand reads before warm-up) and its counters
// (requests, bytes, errors by code, latency histogram). Every read carries the
// snapshot's etag, so a changed object fails with Stale instead of mixing
// versions.
//
// Thread safety: ReadBlock and stats() may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>

#include "cache/block_source.h"
#include "common/priority_semaphore.h"
#include "ufs/ufs.h"

namespace granary {

// Upper bounds (seconds) of the origin request latency histogram; one more
// bucket (+Inf) follows the last.
inline constexpr std::array<double, 12> kOriginLatencyBounds = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0};
inline constexpr size_t kOriginLatencyBuckets = kOriginLatencyBounds.size() + 1;
inline constexpr size_t kStatusCodes = 12;  // Code values 0..11

// The origin's counters since start (monotonic).
struct OriginStats {
  uint64_t requests = 0;  // block GETs sent
  uint64_t bytes = 0;     // bytes received
  uint64_t errors = 0;    // GETs that failed (after the connector's retries)
  // GET latency (the UFS call, not the wait for a slot): count per bucket of
  // kOriginLatencyBounds (not cumulative; last = +Inf) and the sum.
  std::array<uint64_t, kOriginLatencyBuckets> latency_buckets{};
  double latency_sum_s = 0;
  // errors by Code (index = static_cast<int>(code)).
  std::array<uint64_t, kStatusCodes> errors_by_code{};
};

class OriginSource : public BlockSource {
 public:
  OriginSource(std::shared_ptr<UnderStorage> ufs, int concurrency);

  std::string_view name() const override { return "origin"; }
  Result<BlockData> ReadBlock(const BlockRef& ref, Priority priority) override;
  // ReadBlock whose wait for a permit ends at `deadline` (Unavailable) or
  // when `cancel` (may be null) is cancelled (Cancelled). The request itself
  // is bounded by the connector's timeouts.
  Result<BlockData> ReadBlockUntil(const BlockRef& ref, Priority priority,
                                   std::chrono::steady_clock::time_point deadline,
                                   CancelToken* cancel);
  OriginStats stats() const;
  UnderStorage& ufs() { return *ufs_; }

 private:
  void RecordLatency(std::chrono::nanoseconds d);
  void RecordError(Code code);

  std::shared_ptr<UnderStorage> ufs_;
  const int concurrency_;
  PrioritySemaphore slots_;
  std::atomic<uint64_t> requests_{0}, bytes_{0}, errors_{0}, latency_sum_ns_{0};
  std::array<std::atomic<uint64_t>, kOriginLatencyBuckets> latency_buckets_{};
  std::array<std::atomic<uint64_t>, kStatusCodes> errors_by_code_{};
};

}  // namespace granary
