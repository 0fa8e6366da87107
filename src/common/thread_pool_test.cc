// ThreadPool: TrySubmit refuses work past max_queue instead of queueing
// without bound; Submit and shutdown run everything queued; Stop(kDrop)
// drops what has not started.
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace granary {
namespace {

TEST(ThreadPool, TrySubmitRefusesPastMaxQueue) {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, release = false;
  std::atomic<int> ran{0};
  {
    ThreadPool pool(1, "test-pool", 2);
    pool.Submit([&] {
      std::unique_lock lock(mu);
      started = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return started; });  // the worker is busy, the queue empty
    }
    EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
    EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
    EXPECT_FALSE(pool.TrySubmit([&] { ran.fetch_add(100); }));  // full: dropped
    EXPECT_EQ(pool.queued(), 2u);
    {
      std::lock_guard lock(mu);
      release = true;
    }
    cv.notify_all();
    pool.WaitIdle();
    EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));  // room again
  }
  EXPECT_EQ(ran.load(), 3);
}

TEST(ThreadPool, UnboundedPoolTakesEverything) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  }
  EXPECT_EQ(ran.load(), 1000);
}

// A server going away: Stop(kDrop) waits for the running task, destroys the
// queued ones unrun, and every later TrySubmit is refused.
TEST(ThreadPool, StopDroppingQueuedRunsOnlyWhatStarted) {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, release = false;
  std::atomic<int> ran{0};
  auto owned = std::make_shared<int>(7);  // owned by a queued task: freed unrun
  ThreadPool pool(1, "test-pool");
  pool.Submit([&] {
    std::unique_lock lock(mu);
    started = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    ran.fetch_add(1);
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return started; });
  }
  for (int i = 0; i < 5; ++i) pool.Submit([&ran, owned] { ran.fetch_add(100); });
  EXPECT_EQ(owned.use_count(), 6);
  std::thread releaser([&] {
    // The worker is still in the first task, so only Stop() empties the queue.
    while (pool.queued() != 0) std::this_thread::yield();
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  });
  pool.Stop(ThreadPool::QueuedTasks::kDrop);
  releaser.join();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(owned.use_count(), 1);
  EXPECT_FALSE(pool.TrySubmit([&] { ran.fetch_add(1000); }));
  pool.Stop();  // idempotent
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace granary
