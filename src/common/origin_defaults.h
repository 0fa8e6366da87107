// Default number of requests in flight to an origin, shared by everything
// that bounds it: the HTTP/S3 connectors (maxConcurrency), the cache
// engine's origin slots (runtime.cache.ufsConcurrency) and the warm-up's
// fetch threads (granary load --threads, mount --load).
//
// 128: with s3rver on a CPU of its own behind a 0 ms proxy, `granary load` at
// 128 in flight ran at 1,058-1,271 files/s against 891-1,258 at 64 (6
// alternating rounds of 10,000 files; docs/load-status.md). A latency-bound
// origin needs rate x latency in flight: 128 covers 12,800 requests/s at 10 ms.
#pragma once

namespace granary {

inline constexpr int kDefaultOriginConcurrency = 128;

}  // namespace granary
