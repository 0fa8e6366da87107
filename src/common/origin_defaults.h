// Default number of requests in flight to an origin, shared by everything
// that bounds it: the HTTP/S3 connectors (maxConcurrency), the cache
// engine's origin slots (runtime.cache.ufsConcurrency) and the warm-up's
// fetch threads (granary load --threads, mount --load).
//
// 128: with s3rver on a CPU of its own behind a 0 ms proxy, `granary load` at
// 128 in flight ran at 1,058-1,271 files/s against 891-1,258 at 64 (6
// alternating rounds of 10,000 files; docs/load-status.md). A latency-bound
// origin needs rate x latency in flight: 128 covers 12,800 requests/s at 10 ms.
//
// Origin request timeouts (the HTTP/S3 connectors' requestTimeout and
// low-speed abort): a request ends after 120 s in all, or after 30 s below
// 1 KiB/s. A 4 MiB block at 1 KiB/s would take over an hour; no healthy origin
// is that slow, and a stalled one must not hold a reader longer than this.
#pragma once

#include <chrono>
#include <cstdint>

namespace granary {

inline constexpr int kDefaultOriginConcurrency = 128;
inline constexpr std::chrono::milliseconds kDefaultOriginRequestTimeout{120'000};
inline constexpr int64_t kDefaultOriginLowSpeedBytes = 1024;
inline constexpr std::chrono::seconds kDefaultOriginLowSpeedTime{30};

}  // namespace granary
