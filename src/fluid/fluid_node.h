// The Granary pods of a Fluid CacheRuntime (docs/kubernetes.md):
//
//   `granary fluid worker`   a Daemon without a mount (a cluster member that owns
//                            its share of the cache) over the Dataset's mounts
//   `granary fluid client`   a Daemon with the FUSE mount at the runtime's target
//                            path, a member that owns nothing (reads through the
//                            workers, keeps near copies in its own tier if any)
//   `granary fluid dataload` a transient member that makes the owners fetch
//
// Every role serves the Dataset's mounts as one tree through a MountTableUfs
// named DatasetSource(rt) ("fluid://<namespace>/<dataset>"), so the keys, the
// dataset id and the placement agree across pods. A FluidServer watches
// runtime.json: when Fluid rewrites it with other mounts, the new mounts are
// opened and probed, the table swapped and the dataset synced (added mounts
// appear, removed ones disappear, their cache files are dropped) without a
// restart. A new worker list (worker.replicas, option peers) is applied to
// the cluster at once (ClusterNode::SetPeers: handed over, no origin read);
// other changes (tiers, options) need a restart and are logged.
//
// State file: <run_dir>/fluid-<role>-<dataset id>.json, rewritten atomically:
//   {"pid", "role", "source", "control_socket", "mountpoint", "mounted": [...],
//    "ready": bool, "error": "..."}. `granary fluid probe` and `mount-ufs` read it.
//
// Thread safety: FluidServer::Start/Run from one thread; RequestStop from any.
// The watcher thread is the only writer of the table and the state file.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "control/loader.h"
#include "daemon/daemon.h"
#include "fluid/runtime_config.h"
#include "granary/status.h"
#include "ufs/mount_table_ufs.h"

namespace granary::fluid {

std::string_view RoleName(Role role);

struct FluidRunOptions {
  // runtime.json (RuntimeConfigPath()).
  std::string config_path;
  // Directory of the state file, control socket and pid files.
  std::string run_dir = "/run/granary";
  PodIdentity pod;
  // How often runtime.json is read again for changes.
  std::chrono::milliseconds watch_interval{1000};
  // Client: the FUSE mount point ("" = $FLUID_RUNTIME_MOUNT_PATH, else targetPath).
  std::string mountpoint;
  // Client: the mount holder that keeps the FUSE connection when the process
  // was started by one (HolderChannel::FromEnvironment()); nullptr otherwise.
  std::shared_ptr<HolderChannel> holder;
};

// The client's mount point: options.mountpoint, else $FLUID_RUNTIME_MOUNT_PATH,
// else the runtime's targetPath. InvalidArgument when all are empty.
Result<std::string> ClientMountpoint(const FluidRuntime& rt, const FluidRunOptions& options);

// A mount of runtime.json with its opened connector.
struct OpenedMount {
  FluidMount spec;
  UfsMount mount;
};

// Opens every mount's connector and proves it answers (a List of its prefix);
// mounts equal to one in `reuse` keep their connector. Errors name the mount:
// "mounts[1] (val) s3://bucket/val: bucket 'bucket' not found".
Result<std::vector<OpenedMount>> OpenMounts(const FluidRuntime& rt,
                                            const std::vector<OpenedMount>& reuse = {});

// The Daemon a role runs over `table` (everything but the mounts comes from rt
// and the role's options: tiers, cluster, metricsAddr, readMode, ...).
Result<DaemonOptions> BuildDaemonOptions(const FluidRuntime& rt, Role role,
                                         const FluidRunOptions& options,
                                         std::shared_ptr<UnderStorage> table);

// <run_dir>/fluid-<role>-<dataset id>.json.
std::string StatePath(const std::string& run_dir, Role role, const std::string& source);

// The state file of the pod serving `source` in `role`, checked: the process
// named there is alive. NotFound / Unavailable otherwise.
Result<nlohmann::json> ReadState(const std::string& run_dir, Role role, const std::string& source);

class FluidServer {
 public:
  // Reads runtime.json, opens the mounts, starts the daemon (worker or
  // client) and the watcher. Returns once the role serves every mount.
  static Result<std::unique_ptr<FluidServer>> Start(Role role, FluidRunOptions options);
  ~FluidServer();

  // Serves until SIGTERM/SIGINT or RequestStop(); then stops the watcher and
  // the daemon. Returns the daemon's shutdown status.
  Status Run();
  void RequestStop();

  Daemon& daemon() { return *daemon_; }

 private:
  FluidServer(Role role, FluidRunOptions options) : role_(role), options_(std::move(options)) {}
  void WatchLoop();
  // Applies a rewritten runtime.json: a new member list (worker.replicas,
  // option peers) as a membership change, a new mount table and a sync when
  // the mounts changed.
  Status Apply(const FluidRuntime& next);
  // The member-list part of Apply; runtime_ then has next's worker list.
  Status ApplyMembers(const FluidRuntime& next);
  void WriteState(bool ready, const std::string& error);

  const Role role_;
  const FluidRunOptions options_;
  std::string source_;
  std::string config_text_;  // runtime.json as last applied (or refused)
  FluidRuntime runtime_;
  std::vector<OpenedMount> mounts_;
  std::shared_ptr<MountTableUfs> table_;
  std::unique_ptr<Daemon> daemon_;
  std::thread watcher_;
  Mutex mu_;  // guards stop_ (with cv_); a leaf lock
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
};

// `granary fluid dataload`: makes the workers cache `paths` (dataset paths,
// "/imagenet/train"); `replicas[i]` copies wanted of paths[i] (the runtime's
// cacheReplicas is the most it can keep). Progress lines go to `progress`.
// The result is complete() only when every target is cached.
Result<LoadResult> RunDataLoad(const FluidRuntime& rt, const FluidRunOptions& options,
                               const std::vector<std::string>& paths,
                               const std::vector<int>& replicas, int threads,
                               const std::function<void(const std::string&)>& progress);

// Fluid's ReportSummary from a cluster_status reply's "totals" (every value a
// JSON string): cached, cachedPercentage, cacheCapacity, cacheHitRatio,
// fileNum, ufsTotal.
Result<nlohmann::json> ReportSummaryFromTotals(const nlohmann::json& totals);

}  // namespace granary::fluid
