// Daemon: one dataset served on this node -- a Dataset (src/dataset: ufs,
// snapshot, store, engine, cluster) plus what the node needs of it:
//
//   `granary mount`:  Dataset -> EngineFs -> FuseServer, control socket, metrics
//   `granary worker`: Dataset (with its peer server), control socket, metrics;
//                     no mount (mountpoint empty)
//
// Start() fails before anything is mounted when the source is unusable
// (bucket missing, credentials refused: a List of the prefix is tried first),
// the mount point is missing, not empty or already mounted, a cache dir is
// not writable, or the cluster cannot start. Run() serves until
// SIGTERM/SIGINT, RequestStop() or an external unmount, then stops cleanly:
// unmount, cluster left, engine drained, store checkpointed, pid file
// removed, stats file written.
//
// Run directory (default /run/granary): mount-<hash of the mount point>.pid
// holds "pid\nmountpoint\nsource\n" while the daemon runs (granary umount finds
// the daemon through it; under a mount holder the holder writes it, naming
// itself and the daemon); mount-<hash>.stats.json holds DaemonStats as JSON,
// rewritten on SIGUSR1 and at exit. A worker's files are named after
// WorkerRunName(dataset id) instead of a mount point (the names:
// src/control/run_files.h).
//
// Thread safety: Start/Run from one controlling thread. RequestStop(),
// stats(), StatsJson(), WriteStatsFile() and the accessors may be called from
// any thread once Start() returned (e.g. by the control socket service).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/engine.h"
#include "cluster/cluster_node.h"
#include "common/config.h"
#include "common/mutex.h"
#include "common/origin_defaults.h"
#include "common/uri.h"
#include "control/run_files.h"
#include "dataset/dataset.h"
#include "fuse/fuse_server.h"
#include "granary/status.h"
#include "meta/snapshot.h"
#include "store/store.h"
#include "ufs/open.h"
#include "ufs/ufs.h"

namespace granary {

class EngineFs;
struct EngineFsOptions;
class Overlay;
class DaemonServices;
class HolderChannel;
struct HeldConnection;

// How long a stopping daemon process (handle_signals) waits for origin
// transfers still running once every reader has left; then it exits.
inline constexpr std::chrono::seconds kShutdownGrace{5};

struct DaemonOptions {
  // The dataset: source, connector settings, cache dirs, policy, engine,
  // cluster. dataset.source is required.
  DatasetOptions dataset;
  // Existing empty directory to mount on; "" = a worker (no mount: the
  // dataset serves its peers and the control socket only). Also copied into
  // fuse.mountpoint.
  std::string mountpoint;
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
  // `--read-mode auto`: once the snapshot is loaded, the read mode
  // AutoReadMode() picks for the dataset's total size, with
  // auto_cached_max_bytes (0 = the physical memory) as its limit.
  bool read_mode_auto = false;
  uint64_t auto_cached_max_bytes = 0;

  // `--writable` (docs/semantics.md): new files and directories are created
  // in an overlay staged under <dataset dir>/staging and uploaded on close
  // and fsync. Overwriting or deleting origin objects needs allow_overwrite
  // / allow_delete. staging_quota: bytes staged at once (0 = kDefaultStagingQuota);
  // discard_pending: drop what a crash left staged instead of uploading it.
  bool writable = false;
  bool allow_overwrite = false;
  bool allow_delete = false;
  uint64_t staging_quota = 0;
  bool discard_pending = false;

  // Set when a mount holder keeps the FUSE connection (mount_holder.h): a
  // fresh mount is handed to it once INIT is done, or the connection it
  // keeps is taken over (no mount, no INIT, the kernel resends what the
  // previous daemon read). The pid file and the "already served" check are
  // the holder's; SIGUSR2 hands the connection over (Run() returns and
  // handed_over() is true). io_uring is not used: its rings die with the
  // process that registered them.
  std::shared_ptr<HolderChannel> holder;
  // LaunchDaemon of a mount: run the daemon under a mount holder, so the
  // mount outlives it (`--no-restart` turns it off, and so does
  // `--fuse-transport uring`; Daemon::Start ignores it).
  bool hold_mount = true;

  // Checks every field once; errors name the field and the value.
  Status Validate() const;
};

// All counters of a running daemon.
struct DaemonStats {
  FuseStats fuse;
  FuseSessionInfo session;
  EngineStats engine;
  StoreStats store;
  UfsStats ufs;
  std::optional<ClusterStats> cluster;  // absent on a single node
};

// The read mode `--read-mode auto` picks for a dataset of `dataset_bytes`:
// `cached` when it is at most `cached_max_bytes` (0: `physical_bytes`, the
// machine's memory) and passthrough is not required (`--passthrough on`), else
// `passthrough`. Both modes keep one page-cache copy of the data (cached mode
// reads its cache files around the page cache). A dataset that fits is then
// read by repeat epochs with no FUSE request at all; one larger than the
// memory left for the page cache is read from disk again each epoch, where
// cached mode sends a READ only for each file the page cache lost and
// passthrough an OPEN and a RELEASE for every file. Measured with the data at
// 1.5x the memory the page cache may use, cached mode led in every round
// (first epoch 1.10-1.24x passthrough, later ones 0.99-1.18x); at 2x it led
// the first epoch (1.09x) and was even after (0.95-1.07x); at 3x the rounds
// split (later epochs 0.80x and 1.07x) (docs/benchmarks.md, "Read modes over
// a data set larger than memory"). The limit is the whole memory, not 1.5x
// of it, because the training job's own memory is not the page cache's.
FuseReadMode AutoReadMode(uint64_t dataset_bytes, uint64_t cached_max_bytes,
                          uint64_t physical_bytes, bool passthrough_required);
// The limit AutoReadMode applies: `cached_max_bytes`, or `physical_bytes`
// when that is 0.
uint64_t AutoCachedMaxBytes(uint64_t cached_max_bytes, uint64_t physical_bytes);

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

  // True once Run() has left the FUSE connection to a successor (SIGUSR2
  // under a holder) instead of unmounting.
  bool handed_over() const { return handover_.load(); }

  // Registers `hook` to run first when Run() shuts down (before the unmount),
  // e.g. to stop a control socket service that uses engine()/store(). Call
  // before Run(). engine(), store() and fuse() are valid until the hooks ran.
  void AddStopHook(std::function<void()> hook);

  DaemonStats stats() const;
  // stats() as a JSON object (stable field names; see docs/mount.md).
  std::string StatsJson() const;
  // Writes StatsJson() atomically to stats_path().
  Status WriteStatsFile() const;

  Dataset& dataset() { return *dataset_; }
  CacheEngine& engine() { return dataset_->engine(); }
  Store& store() { return dataset_->store(); }
  // The snapshot version the mount shows now (changes with Sync()).
  std::shared_ptr<const Snapshot> snapshot() const { return dataset_->snapshot(); }
  bool is_worker() const { return options_.mountpoint.empty(); }

  // `granary sync`: Dataset::Sync, and the mount switches to the new version
  // (the kernel's cached names under the root are invalidated, so paths
  // resolve in the new version; files already open keep reading the version
  // they were opened in).
  Result<SyncResult> Sync();
  UnderStorage& ufs() { return dataset_->ufs(); }
  FuseServer& fuse() { return *fuse_; }
  const DaemonOptions& options() const { return options_; }
  const std::string& mountpoint() const { return options_.mountpoint; }
  // The mount point, or WorkerRunName() for a worker: what run files are named after.
  const std::string& run_name() const { return run_name_; }
  const std::string& source() const { return options_.dataset.source; }
  const std::string& dataset_id() const { return dataset_->id(); }
  // Directory holding the snapshot and index: <first cache dir>/<dataset-id>.
  const std::string& dataset_dir() const { return dataset_->dir(); }
  std::string stats_path() const;
  std::string pid_path() const;

 private:
  explicit Daemon(DaemonOptions options);
  Status Open();
  Status StartMount();
  // Under a mount holder: the node numbering of the mount (RUN_DIR/mount-<hash>.nodes),
  // read by a successor so the kernel's node ids keep naming the same files.
  void SaveNumbering();
  EngineFsOptions ContinuedNumbering(EngineFsOptions options) const;
  // --read-mode auto: picks cached or passthrough from the snapshot size.
  void ResolveAutoReadMode(const Snapshot& snap);
  // Passthrough over a data set larger than the cached-mode limit (memory,
  // or --auto-cached-max): a cold epoch streams as a cached mount's does.
  bool StreamsPastMemory(const Snapshot& snap) const;
  Status Shutdown();
  void SignalLoop();
  // SIGHUP: reads --cluster-peers-file again and applies a changed member
  // list (logged; a bad list keeps the current one).
  void ReloadPeers();
  // The control socket's drain: checks this member can leave, then stops
  // the daemon with a drain (Shutdown). OK when already asked.
  Status RequestDrain();
  // push_fetched: puts fetched bytes into the mount's page cache. When the
  // kernel does not know the file yet, its directory is listed through the
  // mount first (once per directory and snapshot version). false: not stored.
  bool PushFetched(const Snapshot& snap, uint64_t ino, uint64_t offset, std::string_view bytes);

  DaemonOptions options_;
  std::string run_name_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Overlay> overlay_;  // writable mounts; outlives fs_
  std::thread recover_thread_;        // uploads what a crash left staged
  std::unique_ptr<EngineFs> fs_;
  std::unique_ptr<FuseServer> fuse_;
  std::unique_ptr<DaemonServices> services_;  // control socket, loads, metrics (control_service.h)
  std::thread unmount_watcher_;               // FuseServer::Wait() -> RequestStop()
  std::thread signal_thread_;                 // sigtimedwait loop (handle_signals)

  Mutex stop_mu_;    // guards stop_requested_ and stop_hooks_; a leaf (hooks run without it)
  CondVar stop_cv_;  // signalled when stop_requested_ is set
  bool stop_requested_ GUARDED_BY(stop_mu_) = false;
  std::vector<std::function<void()>> stop_hooks_ GUARDED_BY(stop_mu_);
  std::atomic<bool> shut_down_{false};        // Shutdown() began (signal thread exits)
  std::atomic<bool> handover_{false};         // SIGUSR2 under a holder: Shutdown() detaches
  std::atomic<bool> drain_requested_{false};  // RequestDrain(): Shutdown() drains
  bool streams_past_memory_ = false;          // StreamsPastMemory of the opened snapshot
  std::atomic<bool> detaching_{false};        // the mount is no longer served (PushFetched stops)
  std::unique_ptr<HeldConnection> held_;      // the connection the holder keeps (a restart)
  bool serving_ = false;  // Open() finished: mounted, pid file written (controlling thread)

  mutable Mutex final_mu_;  // guards final_stats_ and has_final_; a leaf lock
  DaemonStats final_stats_ GUARDED_BY(final_mu_);  // counters frozen at shutdown (engine gone)
  bool has_final_ GUARDED_BY(final_mu_) = false;

  Mutex push_mu_;    // guards push_listed_; a leaf (the listing runs without it)
  CondVar push_cv_;  // signalled when a directory's listing ends
  // "version:directory" PushFetched listed (true) or is listing (false).
  std::unordered_map<std::string, bool> push_listed_ GUARDED_BY(push_mu_);
};

// What a pid file says: "pid\nmountpoint\nsource\nstart time\n" and, from a
// mount holder, "daemon pid daemon start time\n".
struct DaemonPidInfo {
  pid_t pid = 0;
  std::string mountpoint;
  std::string source;
  // The process's start time (/proc/PID/stat field 22, clock ticks since
  // boot); 0 in pid files of older versions.
  uint64_t start_ticks = 0;
  // A mount holder's pid file (pid = the holder) adds the daemon it runs
  // now, and its start time: "daemon_pid start_ticks" on a fifth line (0:
  // none running, or not a holder).
  pid_t daemon_pid = 0;
  uint64_t daemon_start_ticks = 0;
};

// Start time of process `pid` in clock ticks since boot (/proc/PID/stat
// field 22); 0 when the process does not exist.
uint64_t ProcessStartTicks(pid_t pid);

// True when the process a pid file names is still that daemon: alive, not a
// zombie, and started at the recorded time (or, for a pid file without one,
// running the same executable as this process). After a kill -9 and pid
// reuse this is false, so nobody signals an unrelated process.
bool PidFileProcessAlive(const DaemonPidInfo& info);

// Reads the pid file of `mountpoint`. NotFound when there is none.
Result<DaemonPidInfo> ReadPidFile(std::string_view run_dir, std::string_view mountpoint);

// True if `path` is a mount point listed in /proc/self/mountinfo.
bool IsMountpoint(std::string_view path);

// `granary mount`: with hold_mount (the default for mounts), a mount holder
// (mount_holder.h) runs the daemon: in this process with --foreground, else
// in a background child (setsid, stdio to the log file) that reports "ready"
// or the first daemon's error through a pipe; the parent returns once it
// reported (OK when ready). Without it: foreground -> Start + Run in this
// process; background -> a forked child runs the daemon and reports the
// same way. A process a holder started (kHolderFdEnv set) runs the daemon
// under it and exits with the status the holder reads. Children never return.
Status LaunchDaemon(DaemonOptions options);

// Runs this process's own command line under a mount holder of
// `mountpoint`, in this process (the Fluid client, which builds its daemon
// itself): the holder starts the command again with kHolderFdEnv set; that
// process serves with HolderChannel::FromEnvironment()'s channel in
// DaemonOptions::holder, reports SendReady or SendFailed, and ends with
// ExitHeldDaemon. Returns when the mount ends, as RunMountHolder does.
Status RunThisCommandUnderMountHolder(const std::string& mountpoint, const std::string& source,
                                      const std::string& run_dir, bool allow_non_empty);

// How a daemon a mount holder started ends: with the exit status the holder
// reads (handed over, a clean stop, a failure).
[[noreturn]] void ExitHeldDaemon(const Status& shutdown, bool handed_over);

// `granary umount`: SIGTERM to the daemon of `mountpoint` (its mount holder,
// which stops the daemon; the daemon itself when the holder is gone) and
// waits (up to `timeout`) for it to exit; if it is dead (or gone) and the mount remains,
// lazy unmount. NotFound "not mounted" when neither daemon nor mount exists.
Status StopDaemon(std::string_view run_dir, std::string_view mountpoint,
                  std::chrono::seconds timeout = std::chrono::seconds(60));

}  // namespace granary
