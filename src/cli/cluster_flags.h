// The --cluster-* flags shared by `granary mount` and `granary worker`
// (docs/cluster.md), and their merge with the config file's runtime.cluster.
//
// Thread safety: values.
#pragma once

#include <string>

#include "cli/cli_common.h"
#include "cluster/cluster_options.h"
#include "common/config.h"

namespace granary::cli {

struct ClusterFlags {
  std::string listen;
  std::string advertise;
  std::string peers;
  std::string peers_file;
  std::string etcd;
  std::string name;
  std::string secret_file;
  bool insecure = false;
  int replicas = 0;  // 0: not given
  std::string peer_timeout;
  bool client_only = false;
  std::string drain_timeout;
};

// Adds the flags to `cmd`.
void AddClusterFlags(CLI::App* cmd, ClusterFlags* f);

// Flags over the config's runtime.cluster (a flag given wins). Usage errors
// name the flag.
Result<ClusterOptions> BuildClusterOptions(const ClusterFlags& f, const ClusterConfig* config);

}  // namespace granary::cli
