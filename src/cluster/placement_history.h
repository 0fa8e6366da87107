// PlacementHistory: the member sets a node's placement had before its last
// changes, kept while the node takes over the share those changes gave it
// (a handover, docs/cluster.md).
//
// When members join or leave, rendezvous hashing moves a key only to or from
// the members that changed: a joining node becomes the owner of keys whose
// bytes are still held by their previous owners (the owners under the member
// set before the change), and the members that stay take over the keys of
// one that leaves. So for a key this node owns and has not cached, the
// members that owned it under an earlier set are asked before the origin,
// until the background pull of the node's new share ends and the earlier
// sets are forgotten.
//
// A recorded set is consulted only for keys this node did not own under it
// (where it did, nobody else was responsible for the key).
//
// Thread safety: every method may be called from any thread; mu_ (a leaf
// lock) guards the kept sets. Placements are immutable and shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/placement.h"
#include "common/mutex.h"

namespace granary::cluster {

class PlacementHistory {
 public:
  // `self_id`: this node's id; `replicas`: owners per key (>= 1).
  PlacementHistory(std::string self_id, int replicas);

  // The placement changed from `prev` to `next`: keeps `prev` when this node
  // owns something under `next` (has capacity there) and `prev` had another
  // member with capacity (someone who may hold what this node now owns).
  // Returns the history's generation after the change (it grows by one per
  // call, kept or not).
  uint64_t Record(std::shared_ptr<const Placement> prev, const Placement& next);

  // The members that owned `placement_key` under the kept sets under which
  // this node did not own it, newest set first, without this node and
  // without repeats. Empty when nothing is kept.
  std::vector<Member> PreviousOwners(std::string_view placement_key) const;

  // Forgets the sets recorded up to generation `upto` (a pull that covered
  // them has ended). Sets recorded later stay.
  void Forget(uint64_t upto);

  // Sets kept now (0: no handover in progress). Lock-free.
  size_t kept() const { return kept_.load(std::memory_order_acquire); }
  uint64_t generation() const;

 private:
  struct Kept {
    uint64_t generation;  // the history's generation when it was recorded
    std::shared_ptr<const Placement> placement;
  };

  const std::string self_id_;
  const size_t replicas_;
  mutable Mutex mu_;                        // guards sets_ and generation_; a leaf lock
  std::vector<Kept> sets_ GUARDED_BY(mu_);  // oldest first
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  std::atomic<size_t> kept_{0};  // sets_.size(), for the read path's fast check
};

}  // namespace granary::cluster
