// ClusterNode's handovers: the taking-over side after a membership change
// (asking earlier owners, the background pass) and the leaving side (Drain).
// See cluster_node.h.
#include <algorithm>
#include <future>
#include <thread>

#include "cache/engine.h"
#include "cluster/cluster_node.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "store/store.h"

namespace granary {
namespace {

using cluster::Member;
using cluster::Placement;

// How often a draining node asks the others whether they have taken over
// (and a handover whether the others have seen the change).
constexpr std::chrono::milliseconds kDrainPoll{200};
// How long a handover waits for every member to place by the same member
// set before it ends anyway (a member left with another static list).
constexpr std::chrono::seconds kAgreementWait{30};

// The member ids of a status row's member set, sorted (empty: not known).
std::vector<std::string> MemberIdsOf(const nlohmann::json& row) {
  std::vector<std::string> ids;
  if (!row.contains("status") || !row["status"].contains("cluster")) return ids;
  const nlohmann::json& c = row["status"]["cluster"];
  if (!c.contains("member_ids") || !c["member_ids"].is_array()) return ids;
  for (const auto& id : c["member_ids"]) {
    if (id.is_string()) ids.push_back(id.get<std::string>());
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

Result<BlockData> ClusterNode::ReadFromPrevious(const BlockRef& ref, Priority priority) {
  if (history_ == nullptr || stopped_.load()) return NotFound("no handover in progress");
  const bool owned = Owns(ref.key, ref.block);
  if (owned && history_->kept() == 0) return NotFound("no handover in progress");
  const std::string pk = cluster::PlacementKey(ref.key.dataset, ref.key.key, ref.key.size,
                                               ref.block, engine().block_size());
  std::vector<Member> owners = history_->PreviousOwners(pk);
  // A block this node does not own under its view: a peer that has seen a
  // membership change this node has not yet (etcd's poll, a SIGHUP that
  // reached it first) asked it as the new owner, or a read here found its
  // owners failing. The owners this node knows of may still hold it (a
  // leaving member serves until everyone has seen it go): asked for their
  // cached copy, never for a fetch, so no request goes round in a circle.
  if (std::shared_ptr<const Placement> p = placement_.load(); p && !owned) {
    for (const Member* m : p->Rank(pk, static_cast<size_t>(options_.replicas))) {
      const bool listed = std::any_of(owners.begin(), owners.end(),
                                      [&](const Member& o) { return o.node_id == m->node_id; });
      if (m->node_id != self_id_ && !listed) owners.push_back(*m);
    }
  }
  if (owners.empty()) return NotFound("no earlier owner");
  const net::BlockRequest req = RequestOf(ref.key, ref.block);
  for (const Member& m : owners) {
    if (!health_.Usable(m.node_id)) continue;
    auto got = ClientFor(m)->GetCachedBlock(req);
    if (got.ok() && (*got)->size() == ref.length) {
      health_.RecordSuccess(m.node_id);
      handover_.blocks.fetch_add(1, std::memory_order_relaxed);
      handover_.bytes.fetch_add(ref.length, std::memory_order_relaxed);
      return std::move(*got);
    }
    const Code c = got.ok() ? Code::kCorruption : got.status().code();
    if (c == Code::kUnavailable || c == Code::kCorruption || c == Code::kPermissionDenied ||
        c == Code::kIoError) {
      health_.RecordFailure(m.node_id);
    }
  }
  return NotFound("no earlier owner holds " + ref.key.key);
}

Result<net::BlockPayload> ClusterNode::GetCachedBlock(const net::BlockRequest& r) {
  const ObjectKey key{.dataset = r.dataset, .key = r.key, .etag = r.etag, .size = r.size};
  ASSIGN_OR_RETURN(ServedBlock b, engine().ServeCached(key, r.block));
  if (b.fd >= 0) {
    return net::BlockPayload{
        .fd = b.fd, .file_offset = b.file_offset, .length = b.length, .checksum = b.checksum};
  }
  return net::BlockPayload{.bytes = b.bytes, .length = b.length};
}

void ClusterNode::HandoverLoop() {
  // Whether every other member that answers places by this node's member set.
  auto others_agree = [this] {
    std::shared_ptr<const Placement> p = placement_.load();
    if (!p) return true;
    std::vector<std::string> ids;
    for (const Member& m : p->members()) ids.push_back(m.node_id);
    std::sort(ids.begin(), ids.end());
    for (const nlohmann::json& row : OtherMemberStatuses(p->members())) {
      if (row.value("state", "") != "up") continue;  // a dead member fetches nothing
      if (MemberIdsOf(row) != ids) return false;
    }
    return true;
  };
  uint64_t done = 0;
  while (true) {
    uint64_t generation = 0;
    {
      MutexLock lock(handover_mu_);
      handover_cv_.Wait(lock, [&]() REQUIRES(handover_mu_) {
        return handover_stop_ || handover_wanted_ != done;
      });
      if (handover_stop_) return;
      generation = handover_wanted_;
    }
    if (history_->kept() == 0) {
      done = generation;
      continue;
    }
    const auto t0 = Clock::Real()->Now();
    const uint64_t blocks0 = handover_.blocks.load();
    // The others see a change a moment apart (etcd's poll, SIGHUPs one after
    // the other); until then one may still fetch, as the owner it thinks it
    // is, a block this node now owns. So the handover ends with a pass that
    // began once every member answering places by this node's member set.
    bool ended = false;
    const auto give_up = t0 + kAgreementWait;
    while (true) {
      const bool agreed = others_agree();
      if (!RunHandoverPass(generation)) break;  // a newer change (or stopping): start over
      if (agreed || Clock::Real()->Now() > give_up) {
        if (!agreed) GLOG_WARN("cluster: handover ends while some member places by another set");
        ended = true;
        break;
      }
      MutexLock lock(handover_mu_);
      if (handover_cv_.WaitFor(lock, kDrainPoll, [&]() REQUIRES(handover_mu_) {
            return handover_stop_ || handover_wanted_ != generation;
          })) {
        break;
      }
    }
    if (!ended) continue;
    history_->Forget(generation);
    handover_.passes.fetch_add(1, std::memory_order_relaxed);
    done = generation;
    GLOG_INFO("cluster: handover ended: {} blocks from earlier owners in {:.1f} s",
              handover_.blocks.load() - blocks0,
              std::chrono::duration<double>(Clock::Real()->Now() - t0).count());
  }
}

bool ClusterNode::RunHandoverPass(uint64_t generation) {
  CacheEngine& engine = *dataset_.engine;
  const std::shared_ptr<const Snapshot> snap = engine.snapshot();
  const uint64_t bs = engine.block_size();
  handover_.objects_total.store(snap->file_count());
  handover_.objects_checked.store(0);
  auto interrupted = [&] {
    MutexLock lock(handover_mu_);
    return handover_stop_ || handover_wanted_ != generation;
  };
  bool stop = false;
  snap->ForEachFile([&](const EntryView& e) {
    if (stop || (stop = interrupted())) return;
    handover_.objects_checked.fetch_add(1, std::memory_order_relaxed);
    if (e.size == 0) return;
    const ObjectKey key = engine.KeyOf(*snap, e);
    const uint64_t blocks = bs == 0 ? 1 : (e.size + bs - 1) / bs;
    for (uint64_t b = 0; b < blocks; ++b) {
      if (!Owns(key, b)) continue;
      auto pulled = engine.PullFromPrevious(key, b);
      if (!pulled.ok()) {
        GLOG_DEBUG("cluster: handover of {} block {}: {}", key.key, b, pulled.status().ToString());
      }
    }
  });
  return !stop;
}

void ClusterNode::StopHandover() {
  {
    MutexLock lock(handover_mu_);
    handover_stop_ = true;
  }
  handover_cv_.NotifyAll();
  if (handover_thread_.joinable()) handover_thread_.join();
}

std::vector<nlohmann::json> ClusterNode::OtherMemberStatuses(const std::vector<Member>& members) {
  std::vector<std::future<nlohmann::json>> pending;
  for (const Member& m : members) {
    if (m.node_id == self_id_) continue;
    pending.push_back(std::async(std::launch::async, [this, m]() -> nlohmann::json {
      nlohmann::json row = {{"node", m.node_id}, {"address", m.address}};
      Result<std::string> text = ClientFor(m)->StatusJson();
      auto parsed = text.ok() ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
      if (!text.ok() || parsed.is_discarded()) {
        row["state"] = "down";
        return row;
      }
      row["state"] = "up";
      row["status"] = std::move(parsed);
      return row;
    }));
  }
  std::vector<nlohmann::json> rows;
  for (auto& f : pending) rows.push_back(f.get());
  return rows;
}

std::vector<Member> ClusterNode::Answering(const std::vector<Member>& members) {
  std::vector<Member> up;
  for (const nlohmann::json& row : OtherMemberStatuses(members)) {
    if (row.value("state", "") != "up") continue;
    for (const Member& m : members) {
      if (m.address == row.value("address", "")) up.push_back(m);
    }
  }
  return up;
}

namespace {

// Whether a member's status lists `id` in its member set.
bool Lists(const nlohmann::json& row, const std::string& id) {
  const nlohmann::json* ids = nullptr;
  if (row.contains("status") && row["status"].contains("cluster")) {
    const nlohmann::json& c = row["status"]["cluster"];
    if (c.contains("member_ids") && c["member_ids"].is_array()) ids = &c["member_ids"];
  }
  if (ids == nullptr) return true;  // an older node: assume it still does
  return std::find(ids->begin(), ids->end(), id) != ids->end();
}

// Whether a member says it is leaving too (draining): it takes nothing over.
bool Leaving(const nlohmann::json& row) {
  if (!row.contains("status") || !row["status"].contains("cluster")) return false;
  return row["status"]["cluster"].value("leaving", false);
}

uint64_t PreviousSets(const nlohmann::json& row) {
  if (!row.contains("status")) return 0;
  const nlohmann::json& s = row["status"];
  if (!s.contains("cluster") || !s["cluster"].contains("handover")) return 0;
  return s["cluster"]["handover"].value("previous_sets", uint64_t{0});
}

}  // namespace

bool ClusterNode::RemovedByOthers() {
  std::shared_ptr<const Placement> p = last_with_self_.load();
  if (!p) return false;
  for (const nlohmann::json& row : OtherMemberStatuses(p->members())) {
    if (row.value("state", "") == "up" && !Lists(row, self_id_)) return true;
  }
  return false;
}

Status ClusterNode::Drain(std::chrono::milliseconds timeout) {
  const auto t0 = Clock::Real()->Now();
  const auto deadline = t0 + timeout;
  std::shared_ptr<const Placement> last = last_with_self_.load();
  if (!last || stopped_.load() || leaving_.exchange(true)) return Status::Ok();
  auto report = [&](std::string state, std::vector<std::string> waiting) {
    MutexLock lock(drain_mu_);
    drain_.state = std::move(state);
    drain_.timeout_s = std::chrono::duration<double>(timeout).count();
    drain_.elapsed_s = std::chrono::duration<double>(Clock::Real()->Now() - t0).count();
    drain_.waiting = std::move(waiting);
    drain_started_ = t0;
  };
  report("draining", {});
  // Out of the member set: etcd deletes this node's key now; the peer
  // server stays up for the others' handover requests.
  if (membership_) membership_->Stop();
  StopHandover();
  // Reads here go to the others from now on, as a client's do.
  std::vector<Member> others;
  for (const Member& m : last->members()) {
    if (m.node_id != self_id_) others.push_back(m);
  }
  placement_.store(std::make_shared<const Placement>(others));
  GLOG_INFO(
      "cluster: draining: left the member set; waiting (at most {} s) for {} member{} to "
      "take over this node's share",
      timeout.count() / 1000, others.size(), others.size() == 1 ? "" : "s");
  std::vector<std::string> waiting;
  while (true) {
    waiting.clear();
    for (const nlohmann::json& row : OtherMemberStatuses(others)) {
      // A dead member takes over nothing, nor does one leaving as well (the
      // whole cluster stopping must not wait for itself).
      if (row.value("state", "") != "up" || Leaving(row)) continue;
      const std::string who = row.value("address", "");
      if (Lists(row, self_id_)) {
        waiting.push_back(who + " (still lists this node)");
      } else if (PreviousSets(row) > 0) {
        waiting.push_back(who + " (handover in progress)");
      }
    }
    if (waiting.empty()) {
      report("drained", {});
      GLOG_INFO("cluster: drained in {:.1f} s: every member has taken over",
                std::chrono::duration<double>(Clock::Real()->Now() - t0).count());
      return Status::Ok();
    }
    if (Clock::Real()->Now() + kDrainPoll > deadline) break;
    report("draining", waiting);
    std::this_thread::sleep_for(kDrainPoll);  // polling the other nodes' status
  }
  std::string names;
  for (const std::string& w : waiting) names += " " + w;
  report("timed_out", std::move(waiting));
  return Unavailable("drain: after " + std::to_string(timeout.count() / 1000) +
                     " s, still waiting for:" + names);
}

}  // namespace granary
