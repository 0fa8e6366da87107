// JSON codec of ClusterStats: the one rendering of a node's cluster counters
// as JSON (the "cluster" object of the daemon's stats file, docs/mount.md).
//
// Field names are the struct's. peer_errors is an object {kind: count};
// peer_latency_buckets an array of per-bucket counts (one per bound of
// net::kPeerLatencyBounds, then +Inf; not cumulative) beside
// peer_latency_sum_s; "server" the peer server's PeerServerStats, with
// requests_by_op an array indexed by op.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "cluster/cluster_node.h"
#include "granary/status.h"

namespace granary {

// Every field of `s`.
nlohmann::json ToJson(const ClusterStats& s);
// A drain's progress: {"state", "elapsed_s", "timeout_s", "waiting": [...]}
// (the "drain" object of ToJson(ClusterStats), and the control op's reply).
nlohmann::json ToJson(const DrainStats& d);

// The inverse of ToJson. A missing field stays empty or 0; InvalidArgument
// names a field of the wrong type or length.
Result<ClusterStats> ClusterStatsFromJson(const nlohmann::json& j);

}  // namespace granary
