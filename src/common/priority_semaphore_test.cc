// PrioritySemaphore: the permit bound holds, a free permit goes to a waiting
// demand read before any waiting warm-up, and every waiter eventually gets a
// permit (no wakeup is lost when releases come in bursts).
#include "common/priority_semaphore.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace granary {
namespace {

using namespace std::chrono_literals;

// Spins until `pred` holds or 10 s pass.
template <typename Pred>
bool WaitFor(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(PrioritySemaphoreTest, NeverMorePermitsThanGivenAndEveryoneFinishes) {
  constexpr int kPermits = 4;
  PrioritySemaphore sem(kPermits);
  std::atomic<int> holders{0};
  std::atomic<int> max_holders{0};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 24; ++t) {
    threads.emplace_back([&, t] {
      Priority p = t % 3 == 0 ? Priority::kHigh : Priority::kLow;
      for (int i = 0; i < 300; ++i) {
        PrioritySemaphore::Permit permit(sem, p);
        int now = ++holders;
        int seen = max_holders.load();
        while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
        }
        if (i % 16 == 0) std::this_thread::yield();
        --holders;
      }
      ++done;
    });
  }
  ASSERT_TRUE(WaitFor([&] { return done.load() == 24; }))
      << "waiters stuck: " << done.load() << " of 24 threads finished";
  for (auto& th : threads) th.join();
  EXPECT_LE(max_holders.load(), kPermits);
  EXPECT_GE(max_holders.load(), 1);
  EXPECT_EQ(sem.Waiting(Priority::kHigh), 0);
  EXPECT_EQ(sem.Waiting(Priority::kLow), 0);
}

TEST(PrioritySemaphoreTest, FreedPermitGoesToTheDemandReadFirst) {
  PrioritySemaphore sem(1);
  sem.Acquire(Priority::kHigh);  // the only permit is in use
  std::mutex mu;
  std::vector<char> order;
  auto waiter = [&](Priority p, char tag) {
    return std::async(std::launch::async, [&, p, tag] {
      sem.Acquire(p);
      {
        std::lock_guard lock(mu);
        order.push_back(tag);
      }
      sem.Release();
    });
  };
  auto low1 = waiter(Priority::kLow, 'L');
  auto low2 = waiter(Priority::kLow, 'L');
  ASSERT_TRUE(WaitFor([&] { return sem.Waiting(Priority::kLow) == 2; }));
  auto high = waiter(Priority::kHigh, 'H');
  ASSERT_TRUE(WaitFor([&] { return sem.Waiting(Priority::kHigh) == 1; }));
  sem.Release();
  for (auto* f : {&high, &low1, &low2}) {
    ASSERT_EQ(f->wait_for(10s), std::future_status::ready) << "a waiter never got the permit";
  }
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], 'H') << "a warm-up request went before the waiting demand read";
}

TEST(PrioritySemaphoreTest, BurstOfReleasesWakesAsManyWaiters) {
  constexpr int kPermits = 8;
  PrioritySemaphore sem(kPermits);
  for (int i = 0; i < kPermits; ++i) sem.Acquire(Priority::kLow);
  std::atomic<int> got{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kPermits; ++i) {
    // One demand read among the warm-up waiters: it must not absorb the
    // wakeups meant for the others.
    Priority p = i == 0 ? Priority::kHigh : Priority::kLow;
    waiters.emplace_back([&, p] {
      sem.Acquire(p);
      ++got;
      while (!release.load()) std::this_thread::sleep_for(1ms);
      sem.Release();
    });
  }
  ASSERT_TRUE(WaitFor(
      [&] { return sem.Waiting(Priority::kHigh) + sem.Waiting(Priority::kLow) == kPermits; }));
  for (int i = 0; i < kPermits; ++i) sem.Release();  // all at once, from one thread
  EXPECT_TRUE(WaitFor([&] { return got.load() == kPermits; }))
      << got.load() << " of " << kPermits << " waiters got one of " << kPermits << " free permits";
  release = true;
  for (auto& th : waiters) th.join();
}

}  // namespace
}  // namespace granary
