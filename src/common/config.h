// Granary's configuration: one YAML file whose shape mirrors Fluid's Dataset and
// Runtime, so users can carry their YAML over, with command-line flags applied
// on top by the CLI.
//
//   dataset:
//     name: imagenet
//     mounts:
//       - mountPoint: s3://bucket/imagenet        # any URI ParseUri accepts
//         name: imagenet
//         options:                                # passed to the under storage
//           endpoint: http://127.0.0.1:9000       # (see docs/configuration.md)
//           region: us-east-1
//         encryptOptions:                         # secrets: never logged
//           - name: accessKeyId
//             valueFrom:
//               secretKeyRef: {name: s3-secret, key: access-key}  # file
//               <secretsDir>/s3-secret/access-key
//           - name: secretAccessKey
//             valueFile: /etc/granary/secret-key  # or an explicit file path
//   runtime:
//     replicas: 1
//     secretsDir: /etc/fluid/secrets
//     tieredstore:
//       levels:
//         - mediumtype: SSD                       # MEM | SSD | HDD
//           path: /var/lib/granary/ssd            # several paths: "a,b" or a list
//           quota: 500G
//           high: "0.95"
//           low: "0.7"
//     cache:
//       policy: training                          # lru | training
//       blockSize: 4MiB
//       ufsConcurrency: 128
//       originTimeout: 60s                        # a read waits this long for the origin
//     cluster:                                    # docs/cluster.md
//       listen: 10.0.0.1:7070
//       advertise: 10.0.0.1:7070                  # default: listen
//       peers: [10.0.0.1:7070, 10.0.0.2:7070]     # static members, or:
//       etcd: [http://10.0.0.9:2379]              # etcd membership
//       name: imagenet                            # default: the dataset id
//       secretFile: /etc/granary/cluster-secret   # or insecure: true
//       replicas: 1
//       peerTimeout: 5s
//       clientOnly: false                         # own no data (a reading member)
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/origin_defaults.h"
#include "granary/status.h"

namespace granary {

// A storage medium, fastest first.
enum class Medium {
  kMem,  // tmpfs directory such as /dev/shm
  kSsd,  // local flash
  kHdd,  // local spinning disk
};

std::string_view MediumName(Medium m);

// One tier of the store: Fluid's tieredstore.levels[i].
struct TierLevel {
  Medium medium = Medium::kSsd;  // mediumtype
  std::string path;              // directory holding this tier's cache files
  uint64_t quota = 0;            // bytes this tier may hold
  double high = 0.95;            // eviction starts above high × quota
  double low = 0.7;              // and stops at low × quota
};

// One dataset mount: Fluid's Dataset.spec.mounts[i].
struct MountSpec {
  std::string uri;   // mountPoint: where the data lives (s3://, file://, http://)
  std::string name;  // a short name; derived from the URI when empty
  std::map<std::string, std::string> options;  // plain settings for the under storage
  // Resolved encryptOptions (name → secret value). Never logged or printed.
  std::map<std::string, std::string> secrets;
};

// runtime.cluster: how the node joins its dataset's cluster (the CLI turns
// it into ClusterOptions; --cluster-* flags win).
struct ClusterConfig {
  std::string listen;        // HOST:PORT of the peer server ("" = no cluster)
  std::string advertise;     // HOST:PORT peers use ("" = listen)
  std::string peers;         // static members, comma-separated HOST:PORT
  std::string etcd;          // etcd endpoints, comma-separated http://HOST:PORT
  std::string name;          // cluster name ("" = the dataset id)
  std::string secret_file;   // shared secret of peer authentication
  bool insecure = false;     // no peer authentication
  bool client_only = false;  // own no data: read through the other members
  int replicas = 1;          // owners per object
  std::string peer_timeout;  // duration text such as "5s" ("" = default)
};

struct Config {
  std::string dataset_name;       // dataset.name
  std::vector<MountSpec> mounts;  // dataset.mounts
  // dataset.accessModes (Fluid's): ReadOnlyMany (default), ReadWriteMany or
  // ReadWriteOnce; either ReadWrite mode makes a mount writable (--writable).
  std::vector<std::string> access_modes;
  bool writable() const;
  int replicas = 1;                                 // runtime.replicas (cluster members)
  std::string secrets_dir = "/etc/fluid/secrets";   // runtime.secretsDir
  std::vector<TierLevel> tiers;                     // runtime.tieredstore.levels, fastest first
  std::string policy = "lru";                       // runtime.cache.policy: lru | training
  uint64_t block_size = 4ull << 20;                 // runtime.cache.blockSize
  int ufs_concurrency = kDefaultOriginConcurrency;  // runtime.cache.ufsConcurrency
  std::string origin_timeout;  // runtime.cache.originTimeout: duration text ("" = default)
  ClusterConfig cluster;       // runtime.cluster

  // Checks ranges and combinations; errors name the field and the value.
  Status Validate() const;
};

// Parses YAML text. `source` names the file in error messages.
Result<Config> ParseConfig(std::string_view yaml_text, std::string_view source = "config");

// Reads and parses a YAML file.
Result<Config> LoadConfigFile(const std::string& path);

// Parses "MEM", "ssd", ... (case-insensitive).
Result<Medium> ParseMedium(std::string_view text);

// A cache directory given as "DIR" or "DIR:QUOTA" (QUOTA a size such as
// 200G; without one quota stays 0 = auto), medium SSD. InvalidArgument
// starting with `what` ("--cache-dir", "cache dir") and the text.
Result<TierLevel> ParseCacheDirSpec(const std::string& text, std::string_view what);

}  // namespace granary
