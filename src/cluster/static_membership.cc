// StaticMembership implementation. See static_membership.h.
#include "cluster/static_membership.h"

#include <algorithm>
#include <set>
#include <utility>

namespace granary::cluster {
namespace {

// Start()'s checks of a list.
Status CheckList(const std::vector<Member>& members) {
  std::set<std::string> ids;
  bool any_capacity = false;
  for (const Member& m : members) {
    RETURN_IF_ERROR(ParseHostPort(m.address).status().WithContext("cluster member"));
    if (!ids.insert(m.node_id).second) {
      return InvalidArgument("cluster member '" + m.node_id + "' is listed twice");
    }
    any_capacity = any_capacity || m.capacity > 0;
  }
  if (!any_capacity) return InvalidArgument("cluster: no member has cache capacity");
  return Status::Ok();
}

// The member ids of a list, sorted: two lists are the same set when equal.
std::vector<std::string> SortedIds(const std::vector<Member>& members) {
  std::vector<std::string> ids;
  for (const Member& m : members) ids.push_back(m.node_id + "@" + m.address);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

StaticMembership::StaticMembership(std::vector<Member> peers, Member self)
    : self_(std::move(self)) {
  if (self_.node_id.empty()) self_.node_id = self_.address;
  members_ = WithSelf(std::move(peers));
  placement_ = std::make_shared<const Placement>(members_);
}

std::vector<Member> StaticMembership::WithSelf(std::vector<Member> peers) const {
  for (Member& m : peers) {
    if (m.node_id.empty()) m.node_id = m.address;
  }
  const bool listed = std::any_of(peers.begin(), peers.end(),
                                  [&](const Member& m) { return m.node_id == self_.node_id; });
  if (!listed) peers.push_back(self_);
  return peers;
}

Status StaticMembership::Start() {
  MutexLock lock(mu_);
  return CheckList(members_);
}

std::shared_ptr<const Placement> StaticMembership::placement() const {
  MutexLock lock(mu_);
  return placement_;
}

void StaticMembership::OnChange(std::function<void(std::shared_ptr<const Placement>)> cb) {
  MutexLock lock(mu_);
  callbacks_.push_back(std::move(cb));
}

Result<bool> StaticMembership::Update(std::vector<Member> peers) {
  MutexLock serial(update_mu_);
  std::vector<Member> next = WithSelf(std::move(peers));
  RETURN_IF_ERROR(CheckList(next));
  std::shared_ptr<const Placement> view;
  std::vector<std::function<void(std::shared_ptr<const Placement>)>> callbacks;
  {
    MutexLock lock(mu_);
    if (SortedIds(next) == SortedIds(members_)) return false;
    view = std::make_shared<const Placement>(next, placement_->generation() + 1);
    members_ = std::move(next);
    placement_ = view;
    callbacks = callbacks_;
  }
  for (const auto& cb : callbacks) cb(view);
  return true;
}

std::string StaticMembership::Describe() const {
  return "static, " + std::to_string(placement()->members().size()) + " peers";
}

}  // namespace granary::cluster
