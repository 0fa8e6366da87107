// Membership: the live set of cluster members of one dataset, as a Placement.
//
// Two implementations: StaticMembership (a fixed list, static_membership.h)
// and EtcdMembership (members register under a lease in etcd and watch each
// other, etcd_membership.h). Both publish immutable Placement views; a new
// view gets the next generation number and is handed to every OnChange
// callback.
//
// Also here: parsing of peer lists and HOST:PORT addresses ("h1:7070",
// "10.0.0.1:7070", "[fd00::1]:7070").
//
// Thread safety: every Membership method may be called from any thread.
// OnChange callbacks run one at a time on an internal thread of the
// implementation (EtcdMembership: the first view on the thread calling
// Start), and must not call Stop().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/placement.h"
#include "granary/status.h"

namespace granary::cluster {

class Membership {
 public:
  virtual ~Membership() = default;

  // Joins the cluster. StaticMembership: validates the list. EtcdMembership:
  // grants a lease, registers this node, reads the members and starts the
  // keepalive and watch; fails with a one-line error within a bounded time if
  // etcd is unreachable. Call once.
  virtual Status Start() = 0;

  // Leaves the cluster (etcd: revokes the lease, so peers see the departure at
  // once). Idempotent; also done by the destructor.
  virtual void Stop() = 0;

  // The current live view. Never null (before Start: the initial view, which
  // may be empty for etcd).
  virtual std::shared_ptr<const Placement> placement() const = 0;

  // Registers `cb`, called with each new view whenever the live member set
  // changes (not for the view current at registration).
  virtual void OnChange(std::function<void(std::shared_ptr<const Placement>)> cb) = 0;

  // One line for logs and status: "static, 3 peers" / "etcd http://h:2379, cluster c, ...".
  virtual std::string Describe() const = 0;
};

// A parsed HOST:PORT. `host` is without brackets for IPv6.
struct HostPort {
  std::string host;
  uint16_t port = 0;
  bool ipv6 = false;
};

// Parses "host:port", "1.2.3.4:port" or "[v6]:port" (port 1-65535; host an
// IPv4 address, an RFC 1123 host name, or a bracketed IPv6 address).
// InvalidArgument "'foo' is not HOST:PORT" (with a reason where useful).
Result<HostPort> ParseHostPort(std::string_view text);

// Parses a comma-separated peer list ("h1:7070,h2:7070"); spaces around
// entries are ignored. Each member gets node_id = address = the entry as
// written and capacity = default_capacity. Errors name the bad entry:
// "--cluster-peers: 'foo' is not HOST:PORT"; duplicates and empty entries are
// errors. An empty or all-blank list gives an empty vector.
Result<std::vector<Member>> ParsePeerList(std::string_view csv, uint64_t default_capacity);

// The text of a peer-list file (--cluster-peers-file) as a ParsePeerList
// list: entries separated by commas, spaces or newlines; '#' starts a
// comment to the end of its line. "a:1\n# gone: b:1\nc:1 d:1" -> "a:1,c:1,d:1".
std::string PeerListFromFileText(std::string_view text);

// Reads `path` and returns its list as ParsePeerList expects it. An errno
// status naming the file when it cannot be read; InvalidArgument when it lists no
// member (an empty file is a mistake, not a cluster of one).
Result<std::string> ReadPeerListFile(const std::string& path);

}  // namespace granary::cluster
