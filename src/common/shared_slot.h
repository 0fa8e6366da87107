// SharedSlot<T>: a std::shared_ptr<T> that many threads read and some replace
// (an ownership oracle, the cluster's placement). load() copies the pointer,
// store()/exchange() replace it; the previous object is released outside the
// lock.
//
// Why not std::atomic<std::shared_ptr<T>>: GCC 12's implementation guards the
// pointer with a lock bit inside the pointer word, which ThreadSanitizer
// cannot see, so every concurrent load/store pair was reported as a data race
// (scripts/test.sh runs the unit tests under TSan and fails on any report).
//
// Thread safety: every method may be called from any thread. mu_ is a leaf
// lock: no other lock is taken while holding it, and T's methods are never
// called under it.
#pragma once

#include <memory>
#include <utility>

#include "common/mutex.h"

namespace granary {

template <typename T>
class SharedSlot {
 public:
  SharedSlot() = default;
  SharedSlot(const SharedSlot&) = delete;
  SharedSlot& operator=(const SharedSlot&) = delete;

  std::shared_ptr<T> load() const {
    MutexLock lock(mu_);
    return p_;
  }

  void store(std::shared_ptr<T> next) { exchange(std::move(next)); }

  // Replaces the pointer; returns the previous one.
  std::shared_ptr<T> exchange(std::shared_ptr<T> next) {
    MutexLock lock(mu_);
    std::swap(p_, next);
    return next;
  }

 private:
  mutable Mutex mu_;  // guards p_; a leaf lock
  std::shared_ptr<T> p_ GUARDED_BY(mu_);
};

}  // namespace granary
