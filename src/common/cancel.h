// CancelToken: a one-way "stop waiting" flag that wakes the waits it is
// passed to (a FUSE_INTERRUPT for one request, a daemon shutting down).
//
// A wait registers a wake-up (CancelToken::Wake, RAII) before it blocks and
// checks cancelled() in its predicate; Cancel() sets the flag and runs every
// registered wake-up once. A wake-up must only notify (lock the waiter's
// mutex briefly and notify its condition variable): it runs under the
// token's mutex, so the waiter must not hold its own mutex while a Wake is
// constructed or destroyed. Lock order: CancelToken::mu_ -> the waiter's mutex.
//
// Thread safety: all methods are thread-safe. A Wake's destructor returns
// only once its function is not running and will not run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>

#include "common/mutex.h"

namespace granary {

class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // Sets the flag and runs the registered wake-ups. Idempotent.
  void Cancel() {
    MutexLock lock(mu_);
    if (cancelled_.exchange(true)) return;
    for (auto& [id, wake] : wakes_) wake();
  }

  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Calls `wake` when the token is cancelled while this object lives (never
  // when it was cancelled before: the waiter's predicate sees the flag).
  class Wake {
   public:
    Wake(CancelToken* token, std::function<void()> wake) : token_(token) {
      if (token_ == nullptr) return;
      MutexLock lock(token_->mu_);
      id_ = ++token_->next_id_;
      token_->wakes_.emplace(id_, std::move(wake));
    }
    ~Wake() {
      if (token_ == nullptr) return;
      MutexLock lock(token_->mu_);
      token_->wakes_.erase(id_);
    }
    Wake(const Wake&) = delete;
    Wake& operator=(const Wake&) = delete;

   private:
    CancelToken* token_;
    uint64_t id_ = 0;
  };

 private:
  // Guards wakes_, next_id_; held while wake-ups run, so taken before the
  // mutex of every waiter (the mutex a wake-up takes).
  Mutex mu_;
  std::atomic<bool> cancelled_{false};
  std::map<uint64_t, std::function<void()>> wakes_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 0;
};

}  // namespace granary
