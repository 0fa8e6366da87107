// PeerHealth implementation. See peer_health.h.
#include "cluster/peer_health.h"

#include <algorithm>

namespace granary::cluster {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

PeerHealth::PeerHealth(PeerHealthOptions options)
    : options_(options), clock_(options.clock != nullptr ? options.clock : Clock::Real()) {}

void PeerHealth::RecordFailure(std::string_view node_id) {
  const Clock::TimePoint now = clock_->Now();
  MutexLock lock(mu_);
  auto it = peers_.find(node_id);
  if (it == peers_.end()) {
    it = peers_.emplace(std::string(node_id), State{}).first;
  }
  State& s = it->second;
  // A request that was in flight while the peer is already skipped: no news.
  if (s.failures > 0 && !s.probing && now < s.retry_at) return;
  s.probing = false;
  s.backoff = s.failures == 0 ? Clock::Duration(options_.initial_backoff)
                              : std::min<Clock::Duration>(s.backoff * 2, options_.max_backoff);
  s.retry_at = now + s.backoff;
  ++s.failures;
}

void PeerHealth::RecordSuccess(std::string_view node_id) { Forget(node_id); }

void PeerHealth::Forget(std::string_view node_id) {
  MutexLock lock(mu_);
  auto it = peers_.find(node_id);
  if (it != peers_.end()) peers_.erase(it);
}

bool PeerHealth::Usable(std::string_view node_id) {
  const Clock::TimePoint now = clock_->Now();
  MutexLock lock(mu_);
  auto it = peers_.find(node_id);
  if (it == peers_.end()) return true;
  State& s = it->second;
  if (now < s.retry_at) return false;
  s.retry_at = now + s.backoff;  // this caller is the probe; others wait a window
  s.probing = true;
  return true;
}

std::vector<PeerBackoff> PeerHealth::Failing() {
  const Clock::TimePoint now = clock_->Now();
  MutexLock lock(mu_);
  std::vector<PeerBackoff> out;
  for (const auto& [id, s] : peers_) {
    out.push_back(PeerBackoff{.node_id = id,
                              .backoff = duration_cast<milliseconds>(s.backoff),
                              .remaining = now < s.retry_at
                                               ? duration_cast<milliseconds>(s.retry_at - now)
                                               : milliseconds(0),
                              .failures = s.failures});
  }
  return out;
}

}  // namespace granary::cluster
