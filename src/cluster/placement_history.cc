// PlacementHistory implementation. See placement_history.h.
#include "cluster/placement_history.h"

#include <algorithm>
#include <utility>

namespace granary::cluster {

PlacementHistory::PlacementHistory(std::string self_id, int replicas)
    : self_id_(std::move(self_id)), replicas_(static_cast<size_t>(std::max(1, replicas))) {}

uint64_t PlacementHistory::Record(std::shared_ptr<const Placement> prev, const Placement& next) {
  const Member* me = next.Find(self_id_);
  const bool owns_now = me != nullptr && me->capacity > 0;
  bool others_owned = false;
  if (prev) {
    for (const Member& m : prev->members()) {
      others_owned = others_owned || (m.node_id != self_id_ && m.capacity > 0);
    }
  }
  MutexLock lock(mu_);
  ++generation_;
  if (owns_now && others_owned) {
    sets_.push_back(Kept{.generation = generation_, .placement = std::move(prev)});
    kept_.store(sets_.size(), std::memory_order_release);
  }
  return generation_;
}

std::vector<Member> PlacementHistory::PreviousOwners(std::string_view placement_key) const {
  std::vector<Member> out;
  if (kept() == 0) return out;
  std::vector<std::shared_ptr<const Placement>> sets;
  {
    MutexLock lock(mu_);
    for (auto it = sets_.rbegin(); it != sets_.rend(); ++it) sets.push_back(it->placement);
  }
  for (const auto& p : sets) {
    const std::vector<const Member*> owners = p->Rank(placement_key, replicas_);
    const bool mine = std::any_of(owners.begin(), owners.end(),
                                  [&](const Member* m) { return m->node_id == self_id_; });
    if (mine) continue;
    for (const Member* m : owners) {
      const bool seen = std::any_of(out.begin(), out.end(),
                                    [&](const Member& o) { return o.node_id == m->node_id; });
      if (!seen) out.push_back(*m);
    }
  }
  return out;
}

void PlacementHistory::Forget(uint64_t upto) {
  std::vector<Kept> dropped;  // released outside the lock
  MutexLock lock(mu_);
  auto keep = std::stable_partition(sets_.begin(), sets_.end(),
                                    [&](const Kept& k) { return k.generation > upto; });
  dropped.assign(std::make_move_iterator(keep), std::make_move_iterator(sets_.end()));
  sets_.erase(keep, sets_.end());
  kept_.store(sets_.size(), std::memory_order_release);
}

uint64_t PlacementHistory::generation() const {
  MutexLock lock(mu_);
  return generation_;
}

}  // namespace granary::cluster
