// PeerHealth: which peers to skip after failures, so a read does not pay a
// connect timeout on a dead peer every time.
//
// Per peer: after a failure the peer is not Usable for a backoff (initial
// 500 ms, doubling per failed probe up to 10 s). When the backoff has passed,
// Usable() lets exactly one caller through as a probe and starts another
// backoff window of the same length (so a probe that never reports does not
// block the peer forever); the probe's RecordFailure doubles the backoff, its
// RecordSuccess forgets the peer. Failures recorded while the peer is already
// being skipped (requests that were in flight when it died) do not lengthen
// the backoff. A peer never seen is Usable.
//
// Thread safety: all methods are thread-safe (one mutex; calls are short).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"

namespace granary::cluster {

struct PeerHealthOptions {
  std::chrono::milliseconds initial_backoff{500};  // skip time after a first failure (> 0)
  std::chrono::milliseconds max_backoff{10000};    // backoff cap (>= initial_backoff)
  Clock* clock = nullptr;                          // nullptr: Clock::Real()
};

// One peer being skipped, for status output.
struct PeerBackoff {
  std::string node_id;
  std::chrono::milliseconds backoff{0};    // the current backoff length
  std::chrono::milliseconds remaining{0};  // until the next probe is let through (0: due now)
  int failures = 0;                        // failures counted towards the backoff
};

class PeerHealth {
 public:
  explicit PeerHealth(PeerHealthOptions options = {});

  // A request to `node_id` failed (connect, timeout, bad reply).
  void RecordFailure(std::string_view node_id);
  // A request to `node_id` succeeded: it is usable again at once.
  void RecordSuccess(std::string_view node_id);
  // True when a request may be sent to `node_id` now. Past a backoff, true for
  // one caller (the probe), false for the others until the probe reports or
  // another backoff window passes.
  bool Usable(std::string_view node_id);
  // Drops what is known about `node_id` (e.g. it left the cluster).
  void Forget(std::string_view node_id);
  // The peers currently tracked as failing, sorted by node id.
  std::vector<PeerBackoff> Failing();

 private:
  struct State {
    Clock::Duration backoff{0};
    Clock::TimePoint retry_at{};  // not usable before this
    int failures = 0;
    bool probing = false;  // a probe was let through and has not failed yet
  };

  const PeerHealthOptions options_;
  Clock* const clock_;
  Mutex mu_;  // guards peers_; leaf lock
  std::map<std::string, State, std::less<>> peers_ GUARDED_BY(mu_);
};

}  // namespace granary::cluster
