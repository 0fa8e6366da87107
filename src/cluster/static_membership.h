// StaticMembership: a fixed member list (--cluster-peers, or Fluid's worker
// replicas), the same on every node.
//
// The members are the list, each with the given capacity (node_id =
// address). This node (`self`) is added when its node id is not in the list,
// with its own capacity (0 for a client-only node that owns nothing); when it
// is listed, the list's entry is kept so every node computes the same
// placement. The set never changes, so OnChange callbacks are never called.
//
// Thread safety: all methods are thread-safe (the view is immutable after
// construction; callbacks are accepted and dropped).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cluster/membership.h"

namespace granary::cluster {

class StaticMembership : public Membership {
 public:
  // `self.node_id` empty: the address is used.
  StaticMembership(std::vector<Member> peers, Member self);

  // Checks every address is HOST:PORT, node ids are unique and at least one
  // member has capacity. InvalidArgument naming the bad entry.
  Status Start() override;
  void Stop() override {}
  std::shared_ptr<const Placement> placement() const override { return placement_; }
  void OnChange(std::function<void(std::shared_ptr<const Placement>)> cb) override {}
  std::string Describe() const override;

 private:
  std::vector<Member> members_;  // as given (validated by Start)
  std::shared_ptr<const Placement> placement_;
};

}  // namespace granary::cluster
