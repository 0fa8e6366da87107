// StaticMembership: a member list given by the operator (--cluster-peers,
// --cluster-peers-file, or Fluid's worker replicas), the same on every node.
//
// The members are the list, each with the given capacity (node_id =
// address). This node (`self`) is added when its node id is not in the list,
// with its own capacity (0 for a client-only node that owns nothing); when it
// is listed, the list's entry is kept so every node computes the same
// placement. The list changes only when the operator gives a new one
// (Update: a re-read peers file, a rewritten runtime.json); each change is a
// new view handed to the OnChange callbacks, as an etcd membership's are.
//
// Thread safety: all methods are thread-safe. mu_ guards the list and the
// view; callbacks run on the thread calling Update, one change at a time
// (update_mu_, taken before mu_ and never held by a callback's callers).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/membership.h"
#include "common/mutex.h"

namespace granary::cluster {

class StaticMembership : public Membership {
 public:
  // `self.node_id` empty: the address is used.
  StaticMembership(std::vector<Member> peers, Member self);

  // Checks every address is HOST:PORT, node ids are unique and at least one
  // member has capacity. InvalidArgument naming the bad entry.
  Status Start() override;
  void Stop() override {}
  std::shared_ptr<const Placement> placement() const override;
  void OnChange(std::function<void(std::shared_ptr<const Placement>)> cb) override;
  std::string Describe() const override;

  // Replaces the list (with the constructor's rule for `self`). A list that
  // fails Start()'s checks is refused (InvalidArgument) and the old one
  // kept. When the member set differs, the next view (generation + 1) is
  // published to every callback before this returns; an equal set
  // publishes nothing. Returns whether a new view was published.
  Result<bool> Update(std::vector<Member> peers);

 private:
  // The list with `self_` added where it is missing; ids default to addresses.
  std::vector<Member> WithSelf(std::vector<Member> peers) const;

  Member self_;
  // Serializes Update (and its callbacks); guards no member; taken before mu_.
  Mutex update_mu_ ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;  // guards members_, placement_, callbacks_; a leaf lock
  // As given, with self (validated by Start/Update).
  std::vector<Member> members_ GUARDED_BY(mu_);
  std::shared_ptr<const Placement> placement_ GUARDED_BY(mu_);
  std::vector<std::function<void(std::shared_ptr<const Placement>)>> callbacks_ GUARDED_BY(mu_);
};

}  // namespace granary::cluster
