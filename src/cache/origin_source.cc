#include "cache/origin_source.h"

#include "common/clock.h"

namespace granary {

OriginSource::OriginSource(std::shared_ptr<UnderStorage> ufs, int concurrency)
    : ufs_(std::move(ufs)), concurrency_(concurrency), slots_(concurrency) {}

Result<BlockData> OriginSource::ReadBlock(const BlockRef& ref, Priority priority) {
  return ReadBlockUntil(ref, priority, std::chrono::steady_clock::time_point::max(), nullptr);
}

Result<BlockData> OriginSource::ReadBlockUntil(const BlockRef& ref, Priority priority,
                                               std::chrono::steady_clock::time_point deadline,
                                               CancelToken* cancel) {
  if (!slots_.AcquireUntil(priority, deadline, cancel)) {
    const std::string what = ufs_->Root() + "/" + ref.key.key;
    if (cancel != nullptr && cancel->cancelled())
      return Cancelled("origin read cancelled: " + what);
    return Unavailable("no origin request slot free before the origin timeout (all " +
                       std::to_string(concurrency_) + " busy): " + what);
  }
  // Not zeroed: the GET writes every byte (a short read fails below).
  auto buf = BlockBuffer::Allocate(ref.length);
  Result<size_t> n = size_t{0};
  {
    struct Held {
      PrioritySemaphore& s;
      ~Held() { s.Release(); }
    } held{slots_};
    requests_.fetch_add(1, std::memory_order_relaxed);
    auto t0 = Clock::Real()->Now();
    std::optional<uint64_t> sum;
    n = ufs_->Read(ref.key.key, ref.offset, buf->span(), ref.key.etag, &sum);
    if (n.ok() && *n == ref.length) buf->set_xxh3(sum);
    RecordLatency(Clock::Real()->Now() - t0);
  }
  if (!n.ok()) {
    RecordError(n.status().code());
    return n.status();
  }
  bytes_.fetch_add(*n, std::memory_order_relaxed);
  if (*n != ref.length) {
    RecordError(Code::kStale);
    return Stale(ufs_->Root() + "/" + ref.key.key + ": object changed at the origin (expected " +
                 std::to_string(ref.length) + " bytes at offset " + std::to_string(ref.offset) +
                 ", got " + std::to_string(*n) + "); run `granary sync`");
  }
  return BlockData(std::move(buf));
}

void OriginSource::RecordError(Code code) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  size_t i = static_cast<size_t>(code);
  errors_by_code_[i < kStatusCodes ? i : kStatusCodes - 1].fetch_add(1, std::memory_order_relaxed);
}

void OriginSource::RecordLatency(std::chrono::nanoseconds d) {
  double secs = std::chrono::duration<double>(d).count();
  size_t b = 0;
  while (b < kOriginLatencyBounds.size() && secs > kOriginLatencyBounds[b]) ++b;
  latency_buckets_[b].fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns_.fetch_add(static_cast<uint64_t>(d.count()), std::memory_order_relaxed);
}

OriginStats OriginSource::stats() const {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  OriginStats s{.requests = ld(requests_), .bytes = ld(bytes_), .errors = ld(errors_)};
  for (size_t i = 0; i < kOriginLatencyBuckets; ++i) s.latency_buckets[i] = ld(latency_buckets_[i]);
  for (size_t i = 0; i < kStatusCodes; ++i) s.errors_by_code[i] = ld(errors_by_code_[i]);
  s.latency_sum_s = static_cast<double>(ld(latency_sum_ns_)) / 1e9;
  return s;
}

}  // namespace granary
