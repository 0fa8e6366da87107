// ClusterOptions: how a node joins its dataset's cluster (docs/cluster.md). A node with `listen`
// set runs a peer server and takes part in placement; its members come from a static list or from
// etcd.
//
// Thread safety: values.
#pragma once

#include <chrono>
#include <string>

#include "granary/status.h"

namespace granary {

struct ClusterOptions {
  // HOST:PORT the peer server listens on ("" = no cluster: a single node).
  std::string listen;
  // HOST:PORT other nodes reach this one at ("" = listen; required when listen
  // is a wildcard address such as 0.0.0.0). Also this node's id.
  std::string advertise;
  // Static membership: "HOST:PORT,HOST:PORT,..." (may include this node).
  std::string peers;
  // Static membership from a file instead (entries separated by commas,
  // spaces or newlines, '#' comments; cluster::ReadPeerListFile), read at
  // start and again on SIGHUP: a changed list is a membership change.
  std::string peers_file;
  // etcd membership: "http://HOST:PORT[,...]" (instead of peers).
  std::string etcd;
  // Cluster name in etcd keys ("" = the dataset id).
  std::string name;
  // File holding the shared secret of peer authentication (HMAC).
  std::string secret_file;
  // Allow a cluster without a secret (peers authenticate nothing).
  bool insecure = false;
  // Owners per object (or block): 1 = each object cached on one node.
  int replicas = 1;
  // A peer request that has not completed by then falls back to the next
  // owner or the origin.
  std::chrono::milliseconds peer_timeout{5000};
  // Connecting to a peer that has not answered by then counts as a failure.
  std::chrono::milliseconds connect_timeout{1000};
  // A member that owns nothing (capacity 0): it reads through the others,
  // opens no peer port (`listen`/`advertise` only name it) and must not be
  // in a static `peers` list.
  bool client_only = false;
  // etcd lease TTL: a member that stops renewing is gone after this.
  std::chrono::milliseconds etcd_ttl{3000};
  // Graceful leave on SIGTERM: how long a leaving node waits for the other
  // members to take over its share (ClusterNode::Drain); 0 = leave at once.
  std::chrono::milliseconds drain_timeout{60000};

  bool enabled() const { return !listen.empty(); }
  // Checks the combination once; errors name the flag and the value.
  Status Validate() const;
};

}  // namespace granary
