#include "cli/cluster_flags.h"

#include "common/units.h"

namespace granary::cli {

void AddClusterFlags(CLI::App* cmd, ClusterFlags* f) {
  cmd->add_option("--cluster-listen", f->listen,
                  "Join the dataset's cluster: serve peers on HOST:PORT")
      ->option_text("HOST:PORT");
  cmd->add_option("--cluster-advertise", f->advertise,
                  "Address peers reach this node at (default: --cluster-listen)")
      ->option_text("HOST:PORT");
  cmd->add_option("--cluster-peers", f->peers, "Static members, this node may be among them")
      ->option_text("HOST:PORT,...");
  cmd->add_option("--cluster-peers-file", f->peers_file,
                  "Static members from a file (one HOST:PORT a line, '#' comments), read again "
                  "on SIGHUP: a changed list is handed over without a restart")
      ->option_text("FILE");
  cmd->add_option("--cluster-etcd", f->etcd, "Membership through etcd (v3) instead of a list")
      ->option_text("http://HOST:PORT,...");
  cmd->add_option("--cluster-name", f->name, "Cluster name in etcd (default: the dataset id)");
  cmd->add_option("--cluster-secret-file", f->secret_file,
                  "Shared secret of peer authentication (same file on every node)")
      ->option_text("FILE");
  cmd->add_flag("--cluster-insecure", f->insecure, "Run a cluster without peer authentication");
  cmd->add_option("--cluster-replicas", f->replicas, "Owners per object (default 1)")
      ->check(CLI::Range(1, 8));
  cmd->add_option("--cluster-peer-timeout", f->peer_timeout,
                  "A peer request not done by then goes to the next owner or the origin "
                  "(default 5s)")
      ->option_text("DURATION");
  cmd->add_flag("--cluster-client-only", f->client_only,
                "Own no data: read through the other members");
  cmd->add_option("--cluster-drain-timeout", f->drain_timeout,
                  "On SIGTERM, wait at most this long for the other members to take over this "
                  "node's share before leaving (default 60s; 0 = leave at once)")
      ->option_text("DURATION");
}

Result<ClusterOptions> BuildClusterOptions(const ClusterFlags& f, const ClusterConfig* config) {
  const ClusterConfig none;
  const ClusterConfig& c = config ? *config : none;
  auto pick = [](const std::string& flag, const std::string& conf) {
    return flag.empty() ? conf : flag;
  };
  ClusterOptions o;
  o.listen = pick(f.listen, c.listen);
  o.advertise = pick(f.advertise, c.advertise);
  o.peers = pick(f.peers, c.peers);
  o.peers_file = f.peers_file;
  // The file replaces the config's list.
  if (!o.peers_file.empty() && f.peers.empty()) o.peers.clear();
  o.etcd = pick(f.etcd, c.etcd);
  o.name = pick(f.name, c.name);
  o.secret_file = pick(f.secret_file, c.secret_file);
  o.insecure = f.insecure || c.insecure;
  o.replicas = f.replicas > 0 ? f.replicas : c.replicas;
  o.client_only = f.client_only || c.client_only;
  const std::string timeout = pick(f.peer_timeout, c.peer_timeout);
  if (!timeout.empty()) {
    auto d = ParseDuration(timeout);
    if (!d.ok()) return InvalidArgument("--cluster-peer-timeout: " + d.status().message());
    o.peer_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
    if (o.peer_timeout.count() <= 0) return InvalidArgument("--cluster-peer-timeout: must be > 0");
  }
  if (!f.drain_timeout.empty()) {
    auto d = ParseDuration(f.drain_timeout);
    if (!d.ok()) return InvalidArgument("--cluster-drain-timeout: " + d.status().message());
    o.drain_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
  }
  RETURN_IF_ERROR(o.Validate());
  return o;
}

}  // namespace granary::cli
