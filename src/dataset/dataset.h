// Dataset: the one way to open a dataset on a node.
//
//   UnderStorage (source URI) -> Snapshot (listing, cached on disk)
//     -> Store (tiered cache dirs) -> CacheEngine [-> ClusterNode: membership,
//        placement, peer server and clients]
//
// Every frontend opens datasets through it: the FUSE mount (Daemon), the
// worker (`granary worker`: a Dataset with its control socket, metrics and
// peer server), tests and benchmarks. Open() fails before anything serves
// when the source is unusable (bucket missing, credentials refused: a List of
// the prefix is tried first), a cache dir is not writable, or the cluster
// cannot start (bad peer address, unreachable etcd, missing secret).
//
// Cache layout (docs/mount.md): for each cache dir D, the tier directory is
// D/<dataset-id>/ (dataset id = DatasetId(source)); the snapshot lives at
// <first cache dir>/<dataset-id>/snapshot and the store index in
// <first cache dir>/<dataset-id>/index. mem_cache adds a MEM tier
// /dev/shm/granary-<dataset-id> in front.
//
// Thread safety: accessors and Sync() may be called from any thread once
// Open() returned; Sync() calls are serialized. Close() from one thread, after
// every user of engine() stopped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/engine.h"
#include "cluster/cluster_options.h"
#include "common/config.h"
#include "common/mutex.h"
#include "common/origin_defaults.h"
#include "granary/status.h"
#include "meta/snapshot.h"
#include "store/store.h"
#include "ufs/open.h"
#include "ufs/ufs.h"

namespace granary {

class ClusterNode;

struct DatasetOptions {
  // Where the dataset lives: any URI ParseUri takes (s3://bucket/prefix, a path). Required.
  // With `origin` set it only names the dataset (its id, its snapshot) and
  // may be any text, e.g. "fluid://default/imagenet" for a mount table.
  std::string source;
  // Connector settings and secrets for `source` (endpoint, region, keys).
  UfsOptions ufs;
  // An UnderStorage the caller made (Fluid's mount table, a test's MemUfs),
  // listed from its root; null = opened from `source` and `ufs`.
  std::shared_ptr<UnderStorage> origin;
  // Cache directories, fastest first (medium, path, quota, watermarks). At
  // least one. quota 0 = auto: min(default_cache_size, 90% of the free space
  // of the filesystem holding the directory plus what the tier directory
  // already holds, so a cache that filled its disk keeps its quota).
  std::vector<TierLevel> cache_dirs = {TierLevel{.path = "/var/lib/granary/cache"}};
  // Quota used for cache dirs given without one (see cache_dirs).
  uint64_t default_cache_size = 100ull << 30;
  // Bytes of a MEM tier under /dev/shm/granary-<dataset-id>, in front of the
  // cache dirs. 0 = none.
  uint64_t mem_cache = 0;
  // Store admission/eviction policy: "lru" | "training".
  std::string policy = "lru";
  // Store block size (objects larger than this are cached block by block).
  uint64_t block_size = 4ull << 20;
  // Engine knobs (the dataset name is set to the dataset id).
  EngineOptions engine;
  // Decides StoreOptions::drop_read_pages once the snapshot is known (a
  // mount in the `cached` read mode keeps its own page-cache copy). Empty: false.
  std::function<bool(const Snapshot&)> drop_read_pages;
  // Store background work (eviction, checkpoints); tests turn it off.
  bool store_background = true;
  // List the prefix once at Open() (fails early on a missing bucket or
  // refused credentials). A daemon taking over a live mount turns it off:
  // the origin may be down or stalled, and the snapshot on disk serves.
  bool probe_source = true;
  // The cluster this node joins (disabled by default).
  ClusterOptions cluster;

  // Checks every field once; errors name the field and the value.
  Status Validate() const;
};

// What `granary sync` did: the origin listed again into a new snapshot
// version, which the dataset now serves.
struct SyncResult {
  uint64_t old_version = 0;
  uint64_t new_version = 0;
  uint64_t files = 0;                // files in the new version
  uint64_t bytes = 0;                // their bytes
  uint64_t added = 0;                // paths new in this version
  uint64_t removed = 0;              // paths gone (or now a directory)
  uint64_t changed = 0;              // same path, other etag or size
  uint64_t unchanged = 0;            // same path, etag and size: their cache files stay valid
  uint64_t cache_files_dropped = 0;  // cache files of removed/changed objects deleted
  uint64_t cache_bytes_dropped = 0;  // their object bytes
  uint64_t invalidated_names = 0;    // kernel entries under the root invalidated (mounts)
  double elapsed_s = 0;
};
nlohmann::json SyncResultToJson(const SyncResult& r);

class Dataset {
 public:
  // Opens the source (OpenUnderStorage), checks it answers, loads or builds the
  // snapshot, opens the store, builds the engine and joins the cluster.
  static Result<std::unique_ptr<Dataset>> Open(DatasetOptions options);
  // The same over an UnderStorage the caller made (tests: MemUfs); `source`
  // still names the dataset (id, snapshot prefix). Same as options.origin = ufs.
  static Result<std::unique_ptr<Dataset>> Open(DatasetOptions options,
                                               std::shared_ptr<UnderStorage> ufs);

  // Close() if not yet closed (errors logged).
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // Leaves the cluster (peer server stopped, membership left), drains the
  // engine's pending admissions and checkpoints the store. Idempotent; the
  // accessors below are invalid afterwards (stats() keeps working).
  Status Close();

  CacheEngine& engine() { return *engine_; }
  Store& store() { return *store_; }
  UnderStorage& ufs() { return *ufs_; }
  const std::shared_ptr<UnderStorage>& shared_ufs() const { return ufs_; }
  // Null on a single node.
  ClusterNode* cluster() { return cluster_.get(); }
  // The snapshot version served now (changes with Sync()).
  std::shared_ptr<const Snapshot> snapshot() const { return engine_->snapshot(); }
  const DatasetOptions& options() const { return options_; }
  // The canonical source URI.
  const std::string& source() const { return options_.source; }
  const std::string& id() const { return id_; }
  // Directory holding the snapshot and index: <first cache dir>/<dataset-id>.
  const std::string& dir() const { return dir_; }

  // `granary sync`: lists the origin again, writes the next snapshot version,
  // switches the engine to it, calls `switched` with the new version (a mount
  // invalidates the kernel's names there and adds to r.invalidated_names), and
  // deletes the cache files of objects removed or changed at the origin. One
  // sync at a time (others wait). Errors: the listing's (nothing changes then).
  using SwitchedHook =
      std::function<void(const std::shared_ptr<const Snapshot>& next, SyncResult& r)>;
  Result<SyncResult> Sync(const SwitchedHook& switched = {});

 private:
  explicit Dataset(DatasetOptions options);
  Status OpenAll();
  Status OpenCache(const std::string& prefix);

  DatasetOptions options_;
  std::string id_;
  std::string dir_;
  std::shared_ptr<UnderStorage> ufs_;
  bool owns_ufs_ = false;  // opened here (not the caller's): Close() aborts its transfers
  std::unique_ptr<Store> store_;
  std::unique_ptr<CacheEngine> engine_;
  std::unique_ptr<ClusterNode> cluster_;
  std::shared_ptr<const Snapshot> opened_snapshot_;  // until the engine exists
  // One Sync() at a time: serializes, guards no member. Held across the whole
  // of Sync(), so taken before every lock Sync() reaches (engine, store).
  Mutex sync_mu_;
  bool closed_ = false;
};

// Short stable id of a dataset source: 12 hex digits of xxh3-64 over the
// canonical URI (ParseUri(source).ToString()).
std::string DatasetId(std::string_view source);

// Creates `dir` (and parents) and proves it is writable; PermissionDenied
// naming `what` and the directory otherwise.
Status PrepareWritableDir(const std::string& dir, std::string_view what);

}  // namespace granary
