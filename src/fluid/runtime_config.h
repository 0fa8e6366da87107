// Fluid's runtime.json (../shared/fluid/CONTRACT.md; docs/kubernetes.md):
// what a Fluid CacheRuntime hands every Granary pod, parsed and checked once,
// and turned into Granary's own settings.
//
//   {"mounts": [{"mountPoint": "s3://bucket/imagenet", "name": "imagenet",
//                "path": "/imagenet", "options": {"endpoint_url": ...},
//                "encryptOptions": {"access-key": "/etc/fluid/secrets/s/ak", ...}}],
//    "accessModes": ["ReadOnlyMany"], "targetPath": "/runtime-mnt/.../cache-fuse",
//    "worker": {"name": "imagenet-worker", "replicas": 3, "options": {...},
//               "service": {"name": "svc-imagenet-worker"},
//               "tieredStoreLevels": [{"mountPaths": [...], "mediumType": "SSD",
//                                      "quotas": ["150Gi"], "high": "0.99", "low": "0.8"}]},
//    "client": {...}}
//
// Parsing reads the secret files named by encryptOptions (their values never
// appear in errors or logs) and checks every field; an error is one line
// naming the field and the offending value, e.g.
//   "mounts[1].mountPoint 'ftp://x': unknown scheme ftp (expected s3, oss, bos, pvc or local)".
//
// Thread safety: values; the functions are pure except for reading files and
// the environment where they say so.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster_options.h"
#include "common/config.h"
#include "common/uri.h"
#include "granary/status.h"
#include "ufs/open.h"

namespace granary::fluid {

// Default peer port of workers and clients (option peerPort).
inline constexpr int kDefaultPeerPort = 7070;
// Where Fluid mounts a `pvc://NAME/SUB` volume into the pod, by default: the
// worker pod template mounts claim NAME at <pvcRoot>/NAME (option pvcRoot).
inline constexpr std::string_view kDefaultPvcRoot = "/underFSStorage";

// One entry of mounts[]: a source of the dataset, shown under `path`.
struct FluidMount {
  std::string name;         // mounts[i].name
  std::string mount_point;  // mounts[i].mountPoint as written
  // Where the mount appears in the dataset's tree, without leading or
  // trailing slash ("" = the root: only for a dataset with one mount).
  std::string path;
  Uri uri;         // the resolved source (pvc:// and local:// become file paths)
  UfsOptions ufs;  // connector options (Granary's names) and secrets (read from files)

  // Equal source and settings (secrets included): an unchanged mount.
  bool operator==(const FluidMount&) const;
};

// worker / client / master: one component of the runtime.
struct FluidComponent {
  bool present = false;  // absent (disabled) components are not written by Fluid
  bool enabled = true;
  std::string name;          // e.g. "imagenet-worker" (the StatefulSet's name)
  int replicas = 1;          // worker: pods of the StatefulSet
  std::string service_name;  // headless service: "<name>-<i>.<service>" reaches pod i
  std::map<std::string, std::string> options;  // the engine's own option keys
  std::vector<TierLevel> tiers;                // tieredStoreLevels, one per path
};

struct FluidRuntime {
  std::vector<FluidMount> mounts;
  std::vector<std::string> access_modes;  // default ["ReadOnlyMany"]
  std::string target_path;                // the client's FUSE mount point
  FluidComponent master, worker, client;
};

// Parses runtime.json text. Errors start with `source` (the file). Secret
// files are read (and must exist); pvc:// claims are looked for under the
// worker option pvcRoot.
Result<FluidRuntime> ParseRuntimeConfig(std::string_view json_text,
                                        std::string_view source = "runtime.json");
// "true"/"false" (also yes/no/on/off/1/0) of an option; InvalidArgument naming `field`.
Result<bool> ParseBoolOption(const std::string& field, const std::string& value);

// The text of a runtime.json file; NotFound naming it when it cannot be read.
Result<std::string> ReadRuntimeConfigText(const std::string& path);
// ReadRuntimeConfigText + ParseRuntimeConfig.
Result<FluidRuntime> LoadRuntimeConfig(const std::string& path);

// options[key], or `fallback` when the key is absent.
std::string OptionOr(const std::map<std::string, std::string>& options, const std::string& key,
                     const std::string& fallback = "");

// The path of runtime.json: `flag` when given, else $FLUID_RUNTIME_CONFIG_PATH,
// else /etc/fluid/config/runtime.json.
std::string RuntimeConfigPath(const std::string& flag);

// The dataset's source name, the same in every pod of the runtime:
// "fluid://<namespace>/<dataset>" from $FLUID_DATASET_NAMESPACE (default
// "default") and $FLUID_DATASET_NAME (default: the worker's name without its
// "-worker" suffix, Fluid's runtime name, which is the dataset's).
std::string DatasetSource(const FluidRuntime& rt);

// The mount paths with a leading slash, in mounts[] order: MountUFS's answer.
std::vector<std::string> MountPaths(const FluidRuntime& rt);

// This pod's ordinal in the worker StatefulSet: the number after the last '-'
// of `pod_name` (from $POD_NAME) when it starts with "<worker name>-", else of
// `hostname`. NotFound when neither names a worker pod.
Result<int> WorkerOrdinal(const FluidComponent& worker, std::string_view pod_name,
                          std::string_view hostname);

// The members of the worker StatefulSet: "<name>-<i>.<service>:<port>" for
// i in 0..replicas-1, or the component option `peers` when given.
Result<std::vector<std::string>> WorkerAddresses(const FluidComponent& worker);

// Which component a pod runs as.
enum class Role {
  kWorker,    // `granary fluid worker`: owns a share of the cache
  kClient,    // `granary fluid client`: the FUSE mount, reads through the workers
  kDataLoad,  // `granary fluid dataload`: a transient reading member
};

// The options a role reads: the worker's options, overlaid by the client's
// for the client (cluster keys such as peerPort and secretFile must agree
// with the workers').
std::map<std::string, std::string> RoleOptions(const FluidRuntime& rt, Role role);

// What the environment tells a pod about itself.
struct PodIdentity {
  std::string pod_name;  // $POD_NAME
  std::string pod_ip;    // $POD_IP
  std::string hostname;  // gethostname()
  // HOST:PORT a client or data load advertises (`--advertise`; "" = the pod
  // IP or hostname at its peerPort). Workers use their StatefulSet address.
  std::string advertise;
};
PodIdentity PodIdentityFromEnvironment();

// The cluster a role joins: static members from the worker StatefulSet (or
// the `peers` option), or etcd (option `etcd`); the worker listens on
// 0.0.0.0:<its port> and advertises its own member address; a client or a
// data load is a member that owns nothing. Options read: peerPort, peers,
// etcd, clusterName, secretFile, insecure, cacheReplicas, peerTimeout. Errors
// name the option.
Result<ClusterOptions> BuildClusterOptions(const FluidRuntime& rt, Role role,
                                           const PodIdentity& pod);

}  // namespace granary::fluid
