// ClusterNode: one node's part of its dataset's cluster (DESIGN §3.6).
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
// Thread safety: every public method may be called from any thread once
// Start() returned. clients_mu_ guards clients_; the placement is an atomic
// shared_ptr replaced on membership changes.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/block_source.h"
#include "cluster/membership.h"
#include "cluster/peer_health.h"
#include "cluster/placement.h"
#include "common/shared_slot.h"
#include "dataset/cluster_options.h"
#include "net/peer_client.h"
#include "net/peer_server.h"
#include "net/peer_service.h"

namespace granary {

class Dataset;

// The cluster's counters and view, for status and /metrics.
struct ClusterStats {
  std::string self;                 // this node's id (advertised address)
  std::string membership;           // Membership::Describe()
  uint64_t members = 0;             // live members, this node included
  uint64_t placement_generation = 0;
  // (Blocks read from peers and fallbacks to the origin are the engine's
  // peer_blocks, peer_bytes and peer_fallbacks.)
  // Peer client errors by kind (connect, timeout, auth, protocol, checksum, remote).
  std::map<std::string, uint64_t> peer_errors;
  // Peer request latency: counts per bucket of net::kPeerLatencyBounds (not
  // cumulative; last = +Inf) and the sum.
  std::vector<uint64_t> peer_latency_buckets;
  double peer_latency_sum_s = 0;
  net::PeerServerStats server;      // what this node served
};

class ClusterNode : public ClusterSource, public net::PeerService {
 public:
  // Starts the peer server, joins the membership and returns once this node
  // is a member. Borrows `dataset` (its engine and store must outlive Stop()).
  static Result<std::unique_ptr<ClusterNode>> Start(const ClusterOptions& options,
                                                    Dataset* dataset);
  ~ClusterNode() override;

  // Leaves the membership and stops the peer server. Idempotent.
  void Stop();

  // --- ClusterSource (the engine's read path) ---
  std::string_view name() const override { return "peer"; }
  bool Owns(const ObjectKey& key, uint64_t block) const override;
  bool IsPrimary(const ObjectKey& key, uint64_t block) const override;
  Result<BlockData> ReadFromOwner(const BlockRef& ref, Priority priority,
                                  bool* next_in_line) override;
  Result<bool> WarmRemote(const ObjectKey& key) override;

  // --- net::PeerService (other nodes' requests) ---
  Result<net::BlockPayload> GetBlock(const net::BlockRequest& r) override;
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
  std::shared_ptr<const cluster::Placement> placement() const { return placement_.load(); }
  std::string listen_address() const;

 private:
  ClusterNode(const ClusterOptions& options, Dataset* dataset);
  Status StartAll();
  // The first n members in HRW order for the block (its owners are the first
  // `replicas`; the ones after them take over a dead owner's share).
  std::vector<const cluster::Member*> Candidates(const cluster::Placement& p, const ObjectKey& key,
                                                 uint64_t block, size_t n) const;
  std::shared_ptr<net::PeerClient> ClientFor(const cluster::Member& m);
  net::BlockRequest RequestOf(const ObjectKey& key, uint64_t block) const;
  void OnMembership(std::shared_ptr<const cluster::Placement> next);

  ClusterOptions options_;
  Dataset* dataset_;
  std::string self_id_;
  std::string secret_;  // never logged
  std::unique_ptr<cluster::Membership> membership_;
  std::unique_ptr<net::PeerServer> server_;
  cluster::PeerHealth health_;
  SharedSlot<const cluster::Placement> placement_;

  mutable std::mutex clients_mu_;  // guards clients_
  std::map<std::string, std::shared_ptr<net::PeerClient>> clients_;  // by address
  // Clients of members that left: their counters still count.
  std::vector<std::shared_ptr<net::PeerClient>> retired_;

  std::mutex provider_mu_;  // guards status_provider_
  std::function<Result<nlohmann::json>()> status_provider_;

  std::atomic<bool> stopped_{false};
};

}  // namespace granary
