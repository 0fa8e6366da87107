// AdaptiveLimit against simulated origins: flat latency (spare capacity) lets
// the limit climb to its maximum; a server of fixed throughput (latency grows
// with the requests in flight) holds it near the knee; Acquire blocks at the
// limit and gives up when told to stop.
#include "common/adaptive_limit.h"

#include <gtest/gtest.h>

#include <thread>

namespace granary {
namespace {

using std::chrono::microseconds;

// Feeds `rounds` full windows where each request's latency is f(in flight).
template <typename F>
void Drive(AdaptiveLimit& l, int rounds, F latency_of) {
  std::atomic<bool> stop{false};
  for (int r = 0; r < rounds; ++r) {
    const int n = l.limit();
    for (int i = 0; i < n; ++i) ASSERT_TRUE(l.Acquire(stop));
    // Everyone in flight completes, twice per window.
    for (int i = 0; i < n; ++i) l.Release(latency_of(n));
    for (int i = 0; i < n; ++i) ASSERT_TRUE(l.Acquire(stop));
    for (int i = 0; i < n; ++i) l.Release(latency_of(n));
  }
}

TEST(AdaptiveLimitTest, FlatLatencyGrowsToTheMaximum) {
  AdaptiveLimit l(8, 2, 64);
  Drive(l, 40, [](int) { return microseconds(10'000); });
  EXPECT_EQ(l.limit(), 64);
}

TEST(AdaptiveLimitTest, SaturatedOriginSettlesNearItsKnee) {
  // 400 requests/s at most, 12 ms at best: latency = max(12 ms, n / 400 s).
  // The knee is n = 400 x 0.012 = 4.8; queue in [4, 8] means n in ~[9, 13].
  AdaptiveLimit l(4, 2, 64);
  auto latency = [](int n) { return microseconds(std::max<int64_t>(12'000, n * 2'500)); };
  Drive(l, 60, latency);
  EXPECT_GE(l.limit(), 8);
  EXPECT_LE(l.limit(), 14);
  // Started far above the knee, it comes down.
  AdaptiveLimit high(64, 2, 64);
  Drive(high, 5, [](int) { return microseconds(12'000); });  // learn the base latency
  Drive(high, 80, latency);
  EXPECT_LE(high.limit(), 14);
}

TEST(AdaptiveLimitTest, AcquireBlocksAtTheLimitAndStops) {
  AdaptiveLimit l(2, 1, 2);
  std::atomic<bool> stop{false};
  ASSERT_TRUE(l.Acquire(stop));
  ASSERT_TRUE(l.Acquire(stop));
  std::atomic<int> got{-1};
  std::thread t([&] { got = l.Acquire(stop) ? 1 : 0; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(got.load(), -1);  // still waiting: two in flight
  l.Release(microseconds(1), /*measured=*/false);
  t.join();
  EXPECT_EQ(got.load(), 1);
  std::thread t2([&] { got = l.Acquire(stop) ? 1 : 0; });
  stop = true;
  l.Wake();
  t2.join();
  EXPECT_EQ(got.load(), 0);
  EXPECT_EQ(l.in_flight(), 2);
}

}  // namespace
}  // namespace granary
