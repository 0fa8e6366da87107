// ClusterNode: one node's part of its dataset's cluster.
//
// Joins the membership (static list or etcd), runs the peer server (answering
// other nodes' block, warm-up and status requests through the engine) and
// keeps one pipelined PeerClient per remote member. As the engine's
// ClusterSource it says which blocks this node owns (rendezvous hashing over
// the live members, weighted by capacity; `replicas` owners) and fetches the
// others from their owners: candidates in HRW order, a failed or slow one
// skipped (PeerHealth backoff) for the next, this node itself ending the
// list (the engine then reads the origin). A peer's failure never fails a
// read.
//
// Membership changes are handovers (cluster_handover.cc): after a change,
// a block this node now owns but does not hold is asked of the members that
// owned it before (cached copies only) before the origin, and a background
// pass pulls the node's new share from them at low priority; when the pass
// ends the earlier member sets are forgotten. Drain() is the leaving side:
// out of the member set first, serving what it holds until the others have
// taken it over.
//
// Identity: with etcd a node's id is kept in its dataset directory
// (cluster/node_identity.h), so a node back on the same disk is the same
// member at any address; with a static list the id is the listed address.
//
// Thread safety: every public method may be called from any thread once
// Start() returned. clients_mu_ guards clients_; the placement is an atomic
// shared_ptr replaced on membership changes; handover_mu_ guards the
// handover thread's wake-up state. Lock order: none of these is held while
// another is taken.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cache/block_source.h"
#include "cluster/cluster_options.h"
#include "cluster/membership.h"
#include "cluster/peer_health.h"
#include "cluster/placement.h"
#include "cluster/placement_history.h"
#include "common/mutex.h"
#include "common/shared_slot.h"
#include "net/peer_client.h"
#include "net/peer_server.h"
#include "net/peer_service.h"

namespace granary {

class CacheEngine;
class Store;

// What a cluster node serves, and where it keeps its identity.
struct ClusterDataset {
  CacheEngine* engine = nullptr;  // must outlive ClusterNode::Stop()
  Store* store = nullptr;         // the engine's store; the same lifetime
  std::string id;                 // the dataset id (DatasetId(source))
  std::string dir;                // <first cache dir>/<dataset id>: the node-id file
  int origin_concurrency = 16;    // the engine's origin slots
};
namespace cluster {
class StaticMembership;
}  // namespace cluster

// The cluster's counters and view, for status and /metrics.
// Progress of the handover after membership changes (see ClusterNode).
struct HandoverStats {
  uint64_t previous_sets = 0;    // earlier member sets still asked (0: no handover in progress)
  uint64_t objects_total = 0;    // objects the running pass walks (the snapshot's files)
  uint64_t objects_checked = 0;  // of those, walked so far
  uint64_t passes = 0;           // passes that ended (each ends a handover)
  uint64_t blocks = 0;           // blocks received from earlier owners (pass and reads)
  uint64_t bytes = 0;            // their bytes
};

// Where a graceful leave (ClusterNode::Drain) stands.
struct DrainStats {
  std::string state;                 // "" (not draining), "draining", "drained" or "timed_out"
  double elapsed_s = 0;              // since the drain began (at its end: how long it took)
  double timeout_s = 0;              // the bound it runs under
  std::vector<std::string> waiting;  // "ADDRESS (why)" of the members not done at the last look
};

struct ClusterStats {
  std::string self;        // this node's id (etcd: from its cache dir; static: its address)
  std::string address;     // the address peers reach it at
  std::string membership;  // Membership::Describe()
  uint64_t members = 0;    // live members, this node included
  uint64_t placement_generation = 0;
  std::vector<std::string> member_ids;  // the live members' ids, sorted
  bool leaving = false;                 // draining: out of the member set, serving until taken over
  DrainStats drain;
  HandoverStats handover;
  // (Blocks read from peers and fallbacks to the origin are the engine's
  // peer_blocks, peer_bytes and peer_fallbacks.)
  // Peer client errors by kind (connect, timeout, auth, protocol, checksum, remote).
  std::map<std::string, uint64_t> peer_errors;
  // Peer request latency: counts per bucket of net::kPeerLatencyBounds (not
  // cumulative; last = +Inf) and the sum.
  std::vector<uint64_t> peer_latency_buckets;
  double peer_latency_sum_s = 0;
  net::PeerServerStats server;  // what this node served
};

class ClusterNode : public ClusterSource, public net::PeerService {
 public:
  // Starts the peer server, joins the membership and returns once this node
  // is a member. Borrows `dataset`'s engine and store.
  static Result<std::unique_ptr<ClusterNode>> Start(const ClusterOptions& options,
                                                    ClusterDataset dataset);
  ~ClusterNode() override;

  // Leaves the membership and stops the peer server. Idempotent.
  void Stop();

  // Graceful leave: leaves the member set (etcd: its key is deleted at once;
  // static: the other nodes' lists decide) while the peer server keeps
  // serving what this node holds, and returns once every other member
  // answers with a member set without this node and no handover in
  // progress (each has taken over its part of this node's share), or at
  // `timeout` (DeadlineExceeded saying who had not). Reads on this node keep
  // working throughout (as a client of the others). Stop() follows.
  Status Drain(std::chrono::milliseconds timeout);
  // True when some member's last answered status lists a member set without
  // this node: it is being removed from a static list (SIGTERM drains then).
  bool RemovedByOthers();

  // A static member list changed (the operator's new list, Fluid's new
  // worker replicas): applies it as a membership change, with the same
  // handover as an etcd change. `list` is a --cluster-peers list. Returns
  // whether the member set changed; InvalidArgument for a bad list (the
  // current one stays) or an etcd membership; Unavailable while leaving.
  Result<bool> SetPeers(std::string_view list);
  // Reads --cluster-peers-file again and applies it (SetPeers).
  Result<bool> ReloadPeersFile();

  // --- ClusterSource (the engine's read path) ---
  std::string_view name() const override { return "peer"; }
  bool Owns(const ObjectKey& key, uint64_t block) const override;
  bool IsPrimary(const ObjectKey& key, uint64_t block) const override;
  Result<BlockData> ReadFromOwner(const BlockRef& ref, Priority priority,
                                  bool* next_in_line) override;
  Result<bool> WarmRemote(const ObjectKey& key) override;
  Result<BlockData> ReadFromPrevious(const BlockRef& ref, Priority priority) override;

  // --- net::PeerService (other nodes' requests) ---
  Result<net::BlockPayload> GetBlock(const net::BlockRequest& r) override;
  Result<net::BlockPayload> GetCachedBlock(const net::BlockRequest& r) override;
  Result<bool> Warm(const net::BlockRequest& r) override;
  Result<std::string> StatusJson() override;

  // What StatusJson answers: this node's status (installed by the daemon's
  // services; until then an error).
  void SetStatusProvider(std::function<Result<nlohmann::json>()> provider);

  // Every live member's status: {"self": id, "members": [{"node", "address",
  // "state": "up"|"down", "error"?, "status"?}]} (this node's own from the
  // provider, the others over the peer protocol, in parallel).
  nlohmann::json MemberStatuses();

  ClusterStats stats() const;
  const std::string& self_id() const { return self_id_; }
  const std::string& self_address() const { return self_address_; }
  std::shared_ptr<const cluster::Placement> placement() const { return placement_.load(); }
  std::string listen_address() const;

 private:
  ClusterNode(const ClusterOptions& options, ClusterDataset dataset);
  CacheEngine& engine() const { return *dataset_.engine; }
  Status StartAll();
  // The first n members in HRW order for the block (its owners are the first
  // `replicas`; the ones after them take over a dead owner's share).
  std::vector<const cluster::Member*> Candidates(const cluster::Placement& p, const ObjectKey& key,
                                                 uint64_t block, size_t n) const;
  std::shared_ptr<net::PeerClient> ClientFor(const cluster::Member& m);
  net::BlockRequest RequestOf(const ObjectKey& key, uint64_t block) const;
  // A static list parsed, refused when it names a client-only node.
  Result<std::vector<cluster::Member>> StaticPeers(std::string_view list) const;
  void OnMembership(const std::shared_ptr<const cluster::Placement>& next);
  // The handover thread: one pass over the snapshot per batch of changes.
  void HandoverLoop();
  // Pulls every block this node owns, lacks and an earlier owner may hold.
  // false: interrupted (a newer change, or stopping) before the end.
  bool RunHandoverPass(uint64_t generation);
  void StopHandover();
  // Each other member's status ({"node", "state", "status"?}); no lock held.
  std::vector<nlohmann::json> OtherMemberStatuses(const std::vector<cluster::Member>& members);
  // The members of `members` (this node left out) that answer a status
  // request now, asked in parallel.
  std::vector<cluster::Member> Answering(const std::vector<cluster::Member>& members);

  ClusterOptions options_;
  ClusterDataset dataset_;
  std::string self_id_;       // set by StartAll before anything uses it
  std::string self_address_;  // advertise, or listen
  std::string secret_;        // never logged
  std::unique_ptr<cluster::Membership> membership_;
  cluster::StaticMembership* static_membership_ = nullptr;  // membership_ when static
  std::unique_ptr<net::PeerServer> server_;
  cluster::PeerHealth health_;
  SharedSlot<const cluster::Placement> placement_;

  mutable Mutex clients_mu_;  // guards clients_, retired_; a leaf lock
  // By address.
  std::map<std::string, std::shared_ptr<net::PeerClient>> clients_ GUARDED_BY(clients_mu_);
  // Clients of members that left: their counters still count.
  std::vector<std::shared_ptr<net::PeerClient>> retired_ GUARDED_BY(clients_mu_);

  Mutex provider_mu_;  // guards status_provider_; a leaf (the provider runs without it)
  std::function<Result<nlohmann::json>()> status_provider_ GUARDED_BY(provider_mu_);

  std::unique_ptr<cluster::PlacementHistory> history_;  // set by StartAll
  // Members of the last view that held this node, for a drain to ask.
  SharedSlot<const cluster::Placement> last_with_self_;

  Mutex handover_mu_;    // guards handover_wanted_, handover_stop_; a leaf lock
  CondVar handover_cv_;  // signalled when either changes
  // History generation a pass should cover.
  uint64_t handover_wanted_ GUARDED_BY(handover_mu_) = 0;
  bool handover_stop_ GUARDED_BY(handover_mu_) = false;
  std::thread handover_thread_;
  struct HandoverCounters {
    std::atomic<uint64_t> objects_total{0}, objects_checked{0}, passes{0}, blocks{0}, bytes{0};
  };
  HandoverCounters handover_;

  std::atomic<bool> stopped_{false};
  std::atomic<bool> leaving_{false};  // Drain() began: out of the member set
  mutable Mutex drain_mu_;            // guards drain_, drain_started_; a leaf lock
  DrainStats drain_ GUARDED_BY(drain_mu_);
  std::chrono::steady_clock::time_point drain_started_ GUARDED_BY(drain_mu_);
};

}  // namespace granary
