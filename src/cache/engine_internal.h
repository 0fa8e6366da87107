// What the engine's source files share of its internals: a block's flight
// and the guard every public call holds (src/cache/engine.cc, engine_peer.cc).
// Not for use outside src/cache.
#pragma once

#include "cache/engine.h"
#include "common/mutex.h"

namespace granary {

// One in-progress fetch of one block. Lives in flights_ from the moment its
// leader registers it until its bytes have been offered to the store, so
// readers arriving meanwhile share the bytes instead of fetching again.
struct CacheEngine::Flight {
  Mutex mu;    // guards everything below; taken after flights_mu_, or alone
  CondVar cv;  // signalled when data_ready or admit_done is set
  bool data_ready GUARDED_BY(mu) = false;
  Status status GUARDED_BY(mu);   // the fetch's outcome, once data_ready
  BlockData data GUARDED_BY(mu);  // the block's bytes, once data_ready and status.ok()
  // The bytes were read from the local store, once data_ready.
  bool from_store GUARDED_BY(mu) = false;
  bool admit_done GUARDED_BY(mu) = false;
  // The store holds the block (admitted now, or already had it).
  bool admitted GUARDED_BY(mu) = false;
};

class CacheEngine::CallGuard {
 public:
  explicit CallGuard(CacheEngine* e) : e_(e) {
    MutexLock lock(e_->calls_mu_);
    ++e_->calls_;
  }
  ~CallGuard() {
    MutexLock lock(e_->calls_mu_);  // notified under the lock: the engine may go right after
    if (--e_->calls_ == 0) e_->calls_cv_.NotifyAll();
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  CacheEngine* e_;
};

}  // namespace granary
