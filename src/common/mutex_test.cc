// Mutex, the scoped locks and CondVar: a CondVar wait releases the mutex
// while it blocks and holds it again on return (timed out or not), and a
// MutexLock released early is not released twice.
#include "common/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace granary {
namespace {

// Whether another thread finds `mu` free (trying it on the holder's thread
// would be undefined).
bool FreeElsewhere(Mutex& mu) {
  bool free = false;
  std::thread([&] {
    if (mu.TryLock()) {
      free = true;
      mu.Unlock();
    }
  }).join();
  return free;
}

class Counter {
 public:
  void Add(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    value_ += n;
    changed_.NotifyAll();
  }
  // Blocks until the value reaches `target`.
  int WaitFor(int target) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    changed_.Wait(lock, [&]() REQUIRES(mu_) { return value_ >= target; });
    return value_;
  }
  // False if the value stayed below `target` for `timeout`.
  bool WaitAtMost(int target, std::chrono::milliseconds timeout) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return changed_.WaitFor(lock, timeout, [&]() REQUIRES(mu_) { return value_ >= target; });
  }
  Mutex& mu() RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  Mutex mu_;  // guards value_; a leaf
  CondVar changed_;
  int value_ GUARDED_BY(mu_) = 0;
};

TEST(Mutex, CondVarWaitReleasesTheLockWhileBlocked) {
  Counter counter;
  std::thread adder([&] {
    for (int i = 0; i < 5; ++i) counter.Add(1);
  });
  EXPECT_GE(counter.WaitFor(5), 5);
  adder.join();
}

TEST(Mutex, TimedWaitReturnsFalseWithTheLockHeld) {
  Counter counter;
  EXPECT_FALSE(counter.WaitAtMost(1, std::chrono::milliseconds(1)));
  EXPECT_TRUE(FreeElsewhere(counter.mu()));  // released when the lock went away
  counter.Add(1);
  EXPECT_TRUE(counter.WaitAtMost(1, std::chrono::milliseconds(1)));
}

TEST(Mutex, MutexLockUnlockedEarlyIsNotUnlockedAgain) {
  Counter counter;
  {
    MutexLock lock(counter.mu());
    EXPECT_FALSE(FreeElsewhere(counter.mu()));
    lock.Unlock();
    EXPECT_TRUE(FreeElsewhere(counter.mu()));
    lock.Lock();
    EXPECT_FALSE(FreeElsewhere(counter.mu()));
    lock.Unlock();
  }
  EXPECT_TRUE(FreeElsewhere(counter.mu()));
}

TEST(Mutex, MutexLockAdoptsAHeldMutex) {
  Mutex mu;
  mu.Lock();
  {
    MutexLock lock(mu, std::adopt_lock);
    EXPECT_FALSE(FreeElsewhere(mu));
  }
  EXPECT_TRUE(FreeElsewhere(mu));
}

TEST(Mutex, ReaderLocksShareWriterLocksExclude) {
  SharedMutex mu;
  {
    ReaderMutexLock a(mu);
    std::thread([&] { ReaderMutexLock b(mu); }).join();  // a second reader does not block
  }
  { WriterMutexLock w(mu); }
}

}  // namespace
}  // namespace granary
