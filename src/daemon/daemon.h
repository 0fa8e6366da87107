// Daemon: one mounted dataset (`granary mount`). Wires the pieces together:
//
//   UnderStorage (source URI) -> Snapshot (listing, cached on disk)
//     -> Store (tiered cache dirs) -> CacheEngine -> EngineFs -> FuseServer
//
// Start() fails before anything is mounted when the source is unusable
// (bucket missing, credentials refused: a List of the prefix is tried first),
// the mount point is missing, not empty or already mounted, or a cache dir
// is not writable. Run() serves until SIGTERM/SIGINT, RequestStop() or an
// external unmount, then stops cleanly: unmount, engine drained, store
// checkpointed, pid file removed, stats file written.
//
// Cache layout (docs/mount.md): for each cache dir D, the tier directory is
// D/<dataset-id>/ (dataset id = DatasetId(source)); the snapshot lives at
// <first cache dir>/<dataset-id>/snapshot and the store index in
// <first cache dir>/<dataset-id>/index. --mem-cache adds a MEM tier
// /dev/shm/granary-<dataset-id> in front.
//
// Run directory (default /run/granary): mount-<hash of the mount point>.pid
// holds "pid\nmountpoint\nsource\n" while the daemon runs (granary umount finds
// the daemon through it); mount-<hash>.stats.json holds DaemonStats as JSON,
// rewritten on SIGUSR1 and at exit (a simple counter surface until the control
// socket's `granary status --json` supersedes it).
//
// Thread safety: Start/Run from one controlling thread. RequestStop(),
// stats(), StatsJson(), WriteStatsFile() and the accessors may be called from
// any thread once Start() returned (e.g. by the control socket service).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/engine.h"
#include "common/config.h"
#include "common/origin_defaults.h"
#include "common/uri.h"
#include "fuse/fuse_server.h"
#include "granary/status.h"
#include "meta/snapshot.h"
#include "store/store.h"
#include "ufs/open.h"
#include "ufs/ufs.h"

namespace granary {

class EngineFs;
class DaemonServices;

struct DaemonOptions {
  // Where the dataset lives: any URI ParseUri takes (s3://bucket/prefix, a path). Required.
  std::string source;
  // Connector settings and secrets for `source` (endpoint, region, keys).
  UfsOptions ufs;
  // Existing empty directory to mount on. Required. Also copied into fuse.mountpoint.
  std::string mountpoint;
  // Cache directories, fastest first (medium, path, quota, watermarks). At
  // least one. quota 0 = auto: min(default_cache_size, 90% of the free space
  // of the filesystem holding the directory).
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
  // Engine knobs (dataset name is set to the dataset id by the daemon).
  EngineOptions engine;
  // FUSE knobs; mountpoint and fsname are filled in by the daemon.
  FuseOptions fuse;
  // Directory of pid and stats files.
  std::string run_dir = "/run/granary";
  // Log file of a background daemon ("" = <run_dir>/mount-<hash>.log). Used by LaunchDaemon.
  std::string log_file;
  // Stay in the foreground (LaunchDaemon: no fork, logs to stderr).
  bool foreground = false;
  // Block SIGTERM/SIGINT/SIGUSR1 and handle them on a daemon thread (stop /
  // write the stats file). Tests running a Daemon in-process turn it off.
  bool handle_signals = true;
  // Prometheus endpoint "HOST:PORT" (docs/metrics.md); "" = off.
  std::string metrics_addr;
  // Start a background load of the whole dataset once the mount serves (`--load`).
  bool load_on_start = false;
  // Concurrent fetches of that load.
  int load_threads = kDefaultOriginConcurrency;
  // In the `cached` read mode, put bytes fetched ahead of their reader
  // (warm-up, readahead) into the mount's page cache at once
  // (FUSE_NOTIFY_STORE) for files the kernel already knows, and write their
  // cache files around the page cache (`--no-push-fetched` turns it off).
  bool push_fetched = true;
  // `--read-mode auto`: once the snapshot is loaded, use the `cached` read
  // mode when the dataset's total size is at most auto_cached_max_bytes (0 =
  // half of physical memory) and passthrough is not required (`--passthrough
  // on`), else `passthrough`. Repeat epochs of a dataset the page cache can
  // hold then run without FUSE requests; a larger one keeps passthrough's
  // single page-cache copy and in-kernel reads (docs/fuse.md).
  bool read_mode_auto = false;
  uint64_t auto_cached_max_bytes = 0;

  // Checks every field once; errors name the field and the value.
  Status Validate() const;
};

// What `granary sync` did: the origin listed again into a new snapshot
// version, which the mount now shows.
struct SyncResult {
  uint64_t old_version = 0;
  uint64_t new_version = 0;
  uint64_t files = 0;      // files in the new version
  uint64_t bytes = 0;      // their bytes
  uint64_t added = 0;      // paths new in this version
  uint64_t removed = 0;    // paths gone (or now a directory)
  uint64_t changed = 0;    // same path, other etag or size
  uint64_t unchanged = 0;  // same path, etag and size: their cache files stay valid
  uint64_t cache_files_dropped = 0;  // cache files of removed/changed objects deleted
  uint64_t cache_bytes_dropped = 0;  // their object bytes
  uint64_t invalidated_names = 0;    // kernel entries under the root invalidated
  double elapsed_s = 0;
};
nlohmann::json SyncResultToJson(const SyncResult& r);

// All counters of a running daemon.
struct DaemonStats {
  FuseStats fuse;
  FuseSessionInfo session;
  EngineStats engine;
  StoreStats store;
  UfsStats ufs;
};

class Daemon {
 public:
  // Opens the source, checks it answers (a List of the prefix), loads or builds
  // the snapshot, opens the store, builds the engine and mounts. Returns once
  // the mount serves requests. On error nothing stays mounted; the error names
  // the problem ("mount point /x does not exist", "bucket 'b' not found", ...).
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);

  // Stops if still running (same as RequestStop + the shutdown Run performs).
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Blocks until SIGTERM/SIGINT (when handle_signals), RequestStop() or an
  // external unmount; then unmounts, drains, checkpoints the store, writes the
  // stats file and removes the pid file. Returns the first shutdown error.
  Status Run();

  // Asks Run() to return. Thread-safe, idempotent, async-signal-unsafe.
  void RequestStop();

  // Registers `hook` to run first when Run() shuts down (before the unmount),
  // e.g. to stop a control socket service that uses engine()/store(). Call
  // before Run(). engine(), store() and fuse() are valid until the hooks ran.
  void AddStopHook(std::function<void()> hook);

  DaemonStats stats() const;
  // stats() as a JSON object (stable field names; see docs/mount.md).
  std::string StatsJson() const;
  // Writes StatsJson() atomically to stats_path().
  Status WriteStatsFile() const;

  CacheEngine& engine() { return *engine_; }
  Store& store() { return *store_; }
  // The snapshot version the mount shows now (changes with Sync()).
  std::shared_ptr<const Snapshot> snapshot() const {
    return engine_ ? engine_->snapshot() : snapshot_;
  }

  // `granary sync`: lists the origin again, writes the next snapshot version,
  // switches the engine and the mount to it (the kernel's cached names under
  // the root are invalidated, so paths resolve in the new version; files
  // already open keep reading the version they were opened in) and deletes
  // the cache files of objects removed or changed at the origin. One sync at a
  // time (others wait). Errors: the listing's (nothing changes then).
  Result<SyncResult> Sync();
  UnderStorage& ufs() { return *ufs_; }
  FuseServer& fuse() { return *fuse_; }
  const DaemonOptions& options() const { return options_; }
  const std::string& mountpoint() const { return options_.mountpoint; }
  const std::string& source() const { return options_.source; }
  const std::string& dataset_id() const { return dataset_id_; }
  // Directory holding the snapshot and index: <first cache dir>/<dataset-id>.
  const std::string& dataset_dir() const { return dataset_dir_; }
  std::string stats_path() const;
  std::string pid_path() const;

 private:
  explicit Daemon(DaemonOptions options);
  Status Open();
  Status OpenCache(const Uri& uri);
  // --read-mode auto: picks cached or passthrough from the snapshot size.
  void ResolveAutoReadMode();
  Status Shutdown();
  void SignalLoop();
  // push_fetched: puts fetched bytes into the mount's page cache. When the
  // kernel does not know the file yet, its directory is listed through the
  // mount first (once per directory and snapshot version). false: not stored.
  bool PushFetched(const Snapshot& snap, uint64_t ino, uint64_t offset, std::string_view bytes);

  DaemonOptions options_;
  std::string dataset_id_;
  std::string dataset_dir_;
  std::shared_ptr<UnderStorage> ufs_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CacheEngine> engine_;
  std::unique_ptr<EngineFs> fs_;
  std::unique_ptr<FuseServer> fuse_;
  std::unique_ptr<DaemonServices> services_;  // control socket, loads, metrics (control_service.h)
  std::thread unmount_watcher_;  // FuseServer::Wait() -> RequestStop()
  std::thread signal_thread_;    // sigtimedwait loop (handle_signals)

  std::mutex stop_mu_;  // guards stop_requested_ and stop_hooks_
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
  std::vector<std::function<void()>> stop_hooks_;
  std::mutex sync_mu_;  // one Sync() at a time
  std::atomic<bool> shut_down_{false};  // Shutdown() began (signal thread exits)
  bool serving_ = false;  // Open() finished: mounted, pid file written (controlling thread)

  mutable std::mutex final_mu_;  // guards final_stats_ and has_final_
  DaemonStats final_stats_;      // counters frozen at shutdown (engine gone)
  bool has_final_ = false;

  std::mutex push_mu_;  // guards push_listed_
  std::condition_variable push_cv_;
  // "version:directory" PushFetched listed (true) or is listing (false).
  std::unordered_map<std::string, bool> push_listed_;
};

// Short stable id of a dataset source: 12 hex digits of xxh3-64 over the
// canonical URI (ParseUri(source).ToString()).
std::string DatasetId(std::string_view source);

// Canonical absolute form of a mount point (realpath when it exists, else as given
// with trailing slashes stripped).
std::string CanonicalMountpoint(std::string_view mountpoint);

// <run_dir>/mount-<12 hex of the canonical mount point>.<ext> (ext: "pid", "stats.json", "log").
std::string RunFilePath(std::string_view run_dir, std::string_view mountpoint,
                        std::string_view ext);

// What a pid file says.
struct DaemonPidInfo {
  pid_t pid = 0;
  std::string mountpoint;
  std::string source;
};

// Reads the pid file of `mountpoint`. NotFound when there is none.
Result<DaemonPidInfo> ReadPidFile(std::string_view run_dir, std::string_view mountpoint);

// True if `path` is a mount point listed in /proc/self/mountinfo.
bool IsMountpoint(std::string_view path);

// `granary mount`: foreground -> Start + Run in this process. Background ->
// fork; the child (setsid, stdio to the log file) starts the daemon and
// reports "ready" or the error through a pipe, then runs; the parent returns
// once the child reported (OK when ready). The child never returns.
Status LaunchDaemon(DaemonOptions options);

// `granary umount`: SIGTERM to the daemon of `mountpoint` and waits (up to
// `timeout`) for it to exit; if it is dead (or gone) and the mount remains,
// lazy unmount. NotFound "not mounted" when neither daemon nor mount exists.
Status StopDaemon(std::string_view run_dir, std::string_view mountpoint,
                  std::chrono::seconds timeout = std::chrono::seconds(60));

}  // namespace granary
