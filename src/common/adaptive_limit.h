// AdaptiveLimit: a concurrency limit that finds how many requests an origin
// serves best, from their latencies (the idea of TCP Vegas): while latency
// stays near the lowest seen, more requests in flight means more throughput,
// so the limit grows; once requests queue at the origin (latency grows with
// the limit, throughput does not), it shrinks. A real object store with spare
// capacity keeps latency flat and the limit climbs to its maximum; a
// saturated one (a single-process S3 emulator, a busy NFS server) settles
// near its knee instead of degrading under more load than it can take.
//
// Per window of completed requests (max(2 x limit, 8) of them): avg = mean
// latency, base = the lowest window mean so far, queue = limit x (1 - base /
// avg), the requests estimated to wait at the origin. queue < 4: limit +=
// max(1, limit / 4); queue > 8: limit -= max(1, limit / 8); clamped to
// [min, max]. Start low (a few requests) so that the base latency is measured
// before the origin queues.
//
// Thread safety: all methods may be called from any thread; mu_ guards all state.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace granary {

class AdaptiveLimit {
 public:
  // Estimated requests waiting at the origin: grow below, shrink above. A
  // few queued requests keep the origin busy while callers do their own
  // work between requests (a load writes each object to the cache).
  static constexpr double kGrowBelow = 4;
  static constexpr double kShrinkAbove = 8;

  AdaptiveLimit(int initial, int min, int max);

  // Waits until fewer than limit() requests are in flight, then counts one
  // more. Returns false (without counting) once `stop` is true.
  bool Acquire(const std::atomic<bool>& stop);
  // Ends one request started by Acquire. `latency` is fed to the controller
  // when `measured` (false: the request did no origin work, e.g. a skip).
  void Release(std::chrono::nanoseconds latency, bool measured = true);
  // Wakes waiters so they can see `stop` (call after setting it).
  void Wake();

  int limit() const;
  int in_flight() const;

 private:
  void Adjust();  // end of a window; mu_ held

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int limit_;
  const int min_;
  const int max_;
  int in_flight_ = 0;
  int window_count_ = 0;
  double window_sum_s_ = 0;
  double base_s_ = 0;  // 0 until the first window
};

}  // namespace granary
