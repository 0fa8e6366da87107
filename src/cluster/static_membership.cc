// StaticMembership implementation. See static_membership.h.
#include "cluster/static_membership.h"

#include <algorithm>
#include <set>
#include <utility>

namespace granary::cluster {

StaticMembership::StaticMembership(std::vector<Member> peers, Member self)
    : members_(std::move(peers)) {
  if (self.node_id.empty()) self.node_id = self.address;
  for (Member& m : members_) {
    if (m.node_id.empty()) m.node_id = m.address;
  }
  const bool listed = std::any_of(members_.begin(), members_.end(),
                                  [&](const Member& m) { return m.node_id == self.node_id; });
  if (!listed) members_.push_back(std::move(self));
  placement_ = std::make_shared<const Placement>(members_);
}

Status StaticMembership::Start() {
  std::set<std::string> ids;
  bool any_capacity = false;
  for (const Member& m : members_) {
    RETURN_IF_ERROR(ParseHostPort(m.address).status().WithContext("cluster member"));
    if (!ids.insert(m.node_id).second) {
      return InvalidArgument("cluster member '" + m.node_id + "' is listed twice");
    }
    any_capacity = any_capacity || m.capacity > 0;
  }
  if (!any_capacity) return InvalidArgument("cluster: no member has cache capacity");
  return Status::Ok();
}

std::string StaticMembership::Describe() const {
  return "static, " + std::to_string(placement_->members().size()) + " peers";
}

}  // namespace granary::cluster
