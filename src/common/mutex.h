// Mutex, SharedMutex, their scoped locks and CondVar: std::mutex,
// std::shared_mutex and std::condition_variable with Clang thread-safety
// annotations (common/thread_annotations.h), so the compiler checks that
// every GUARDED_BY member is touched only with its mutex held.
//
// Usage:
//   mutable Mutex mu_;  // guards queue_; taken before Store::mu_
//   std::deque<Task> queue_ GUARDED_BY(mu_);
//   CondVar cv_;        // signalled when queue_ gains a task
//   ...
//   MutexLock lock(mu_);
//   cv_.Wait(lock, [this]() REQUIRES(mu_) { return !queue_.empty(); });
//
// Invariants: each wrapper holds exactly the std type it wraps and adds no
// state beyond MutexLock's "still held" flag; behaviour (fairness, blocking,
// spurious wake-ups of CondVar without a predicate) is the std type's.
// Mutex is not recursive: locking it twice on one thread deadlocks.
//
// Lock order: each mutex's declaration comment gives its place in the order
// ("taken before X", "taken after Y", or "a leaf: nothing is taken while it
// is held"). Most mutexes in Granary are leaves; a thread holding one calls
// no code that takes another, and never blocks on I/O with it held.
//
// Thread safety: Mutex and SharedMutex are shared by threads; a scoped lock
// belongs to the thread that made it; CondVar may be notified from any
// thread, with or without the mutex held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "common/thread_annotations.h"

namespace granary {

class CondVar;

// An exclusive, non-recursive mutex.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // True (and held) if the mutex was free; never blocks.
  [[nodiscard]] bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis the calling thread holds the mutex (checks nothing at
  // run time): for code reached only with the lock held through a path the
  // analysis cannot follow.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// A reader-writer mutex: one writer (Lock) or many readers (LockShared).
class CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex from construction to destruction (std::lock_guard), or to an
// earlier Unlock(); Lock() takes it again (std::unique_lock's unlock/lock).
// The destructor releases the mutex only if held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  // Takes over `mu`, which the caller already holds (a Lock() or a
  // successful TryLock()): `MutexLock lock(mu, std::adopt_lock);`.
  MutexLock(Mutex& mu, std::adopt_lock_t) REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex early; the caller holds it (has not called Unlock).
  void Unlock() RELEASE() {
    held_ = false;
    mu_.Unlock();
  }
  // Takes the mutex again after Unlock().
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  friend class CondVar;
  Mutex& mu_;
  bool held_ = true;
};

// Holds a SharedMutex exclusively for its lifetime.
class SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterMutexLock() RELEASE() { mu_.Unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared (as one of possibly many readers) for its lifetime.
class SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderMutexLock() RELEASE() { mu_.UnlockShared(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

// A condition variable whose waits release and retake a held MutexLock
// (std::condition_variable on the Mutex's std::mutex). Every Wait* is entered
// with `lock` held and returns with it held, on every path. The predicate
// overloads wait until pred() is true (checked with the lock held, first
// before any wait); a predicate lambda reading guarded members is declared
// `[...]() REQUIRES(mu_) { ... }` so that the analysis accepts its body.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  // Blocks until notified (or a spurious wake-up).
  void Wait(MutexLock& lock) {
    std::unique_lock<std::mutex> native = Adopt(lock);
    cv_.wait(native);
    native.release();
  }
  // The predicate's body is checked where it is written (REQUIRES on the
  // lambda); this template cannot name the caller's mutex, so it is not.
  template <typename Predicate>
  void Wait(MutexLock& lock, Predicate pred) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native = Adopt(lock);
    cv_.wait(native, std::move(pred));
    native.release();
  }

  // Blocks until notified or `timeout` passed: std::cv_status::timeout if it
  // passed.
  template <typename Rep, typename Period>
  std::cv_status WaitFor(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout) {
    std::unique_lock<std::mutex> native = Adopt(lock);
    std::cv_status status = cv_.wait_for(native, timeout);
    native.release();
    return status;
  }
  // pred()'s value when it became true or `timeout` passed.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout,
               Predicate pred) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native = Adopt(lock);
    bool result = cv_.wait_for(native, timeout, std::move(pred));
    native.release();
    return result;
  }

  // Blocks until notified or `deadline`: std::cv_status::timeout if it passed.
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(MutexLock& lock,
                           const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock<std::mutex> native = Adopt(lock);
    std::cv_status status = cv_.wait_until(native, deadline);
    native.release();
    return status;
  }
  // pred()'s value when it became true or `deadline` passed.
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline,
                 Predicate pred) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> native = Adopt(lock);
    bool result = cv_.wait_until(native, deadline, std::move(pred));
    native.release();
    return result;
  }

 private:
  // A std::unique_lock over the held mutex that does not unlock it when it
  // goes away (each Wait* calls release() after waiting).
  static std::unique_lock<std::mutex> Adopt(MutexLock& lock) {
    return std::unique_lock<std::mutex>(lock.mu_.mu_, std::adopt_lock);
  }

  std::condition_variable cv_;
};

}  // namespace granary
