// `granary mount SOURCE MOUNTPOINT [flags]`: mounts a dataset read-only through
// the cache (docs/mount.md). `granary worker SOURCE [flags]`: the same daemon
// without a mount, in the foreground: a cluster node that caches its share of
// the dataset for its peers (docs/cluster.md); `granary worker --drain SOURCE`
// makes a running worker leave its cluster gracefully and follows the drain
// until the worker stopped. Flags become DaemonOptions; --config lends the
// source's connector options plus tiers, policy and block size where the
// flags do not say otherwise. Without --foreground the command returns once
// the mount is ready (exit 0) or prints "granary: mount <mp>: <reason>" and
// exits 1; bad flag values exit 2.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/cluster_flags.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/origin_defaults.h"
#include "common/units.h"
#include "control/control.h"
#include "control/control_request.h"
#include "daemon/daemon.h"
#include "daemon/holder_channel.h"
#include "dataset/dataset.h"

namespace granary::cli {
namespace {

struct MountFlags {
  std::string source;
  std::string mountpoint;
  std::vector<std::string> cache_dirs;
  std::string cache_size;
  std::string mem_cache = "0";
  std::string policy;
  std::string read_mode = "auto";
  std::string auto_cached_max;
  std::string transport = "auto";
  std::string passthrough = "auto";
  std::string block_size;
  std::string origin_timeout;
  std::string log_file;
  std::string run_dir = "/run/granary";
  bool foreground = false;
  bool drain = false;  // worker --drain SOURCE
  bool no_restart = false;
  std::string upgrade;  // --upgrade MOUNTPOINT
  std::string binary;   // --binary PATH (with --upgrade)
  // Cold reads block a transport thread for one origin round trip, so the
  // threads bound the cold epoch's concurrency (2 threads x 10 ms = 200 files/s):
  // 16 by default, like a loader's 16 readers.
  int fuse_threads = 16;
  bool allow_other = false;
  bool no_dir_prefetch = false;
  double count_file_reads = FuseOptions{}.count_file_reads;
  bool no_push_fetched = false;
  bool writable = false;
  bool allow_overwrite = false;
  bool allow_delete = false;
  bool discard_pending = false;
  std::string staging_quota;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::string metrics_addr;
  bool load = false;
  int load_threads = kDefaultOriginConcurrency;
  ClusterFlags cluster;
};

// The cache's flags (--cache-dir, --cache-size, --mem-cache, --policy,
// --block-size, --origin-timeout) over the --config file's values.
Status ApplyCacheFlags(const MountFlags& f, const std::optional<Config>& config,
                       DatasetOptions& d) {
  if (!f.cache_size.empty()) {
    ASSIGN_OR_RETURN(d.default_cache_size, ParseSize(f.cache_size));
    if (d.default_cache_size == 0) return InvalidArgument("--cache-size: must be > 0");
  }
  if (!f.cache_dirs.empty()) {
    d.cache_dirs.clear();
    for (const std::string& text : f.cache_dirs) {
      ASSIGN_OR_RETURN(TierLevel t, ParseCacheDirSpec(text, "--cache-dir"));
      d.cache_dirs.push_back(t);
    }
  } else if (config && !config->tiers.empty()) {
    d.cache_dirs.clear();
    for (const TierLevel& t : config->tiers) {
      if (t.medium == Medium::kMem) {
        d.mem_cache = t.quota;  // a MEM level becomes the memory tier
      } else {
        d.cache_dirs.push_back(t);
      }
    }
    if (d.cache_dirs.empty()) d.cache_dirs.push_back(TierLevel{.path = "/var/lib/granary/cache"});
  }
  if (f.mem_cache != "0") {
    ASSIGN_OR_RETURN(d.mem_cache, ParseSize(f.mem_cache));
  }
  d.policy = !f.policy.empty() ? f.policy : config ? config->policy : "lru";
  if (d.policy != "lru" && d.policy != "training") {
    return InvalidArgument("--policy: '" + d.policy + "' is not lru or training");
  }
  if (!f.block_size.empty()) {
    ASSIGN_OR_RETURN(d.block_size, ParseSize(f.block_size));
  } else if (config) {
    d.block_size = config->block_size;
  }
  if (config) d.engine.origin_concurrency = config->ufs_concurrency;
  const std::string& timeout = !f.origin_timeout.empty() ? f.origin_timeout
                               : config                  ? config->origin_timeout
                                                         : f.origin_timeout;
  if (!timeout.empty()) {
    Result<std::chrono::nanoseconds> t = ParseDuration(timeout);
    if (!t.ok()) return InvalidArgument("--origin-timeout: " + t.status().message());
    d.engine.origin_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*t);
    if (d.engine.origin_timeout.count() <= 0) {
      return InvalidArgument("--origin-timeout: must be at least 1ms");
    }
  }
  return Status::Ok();
}

// The mount's own flags: read mode, FUSE transport and passthrough, writes.
Status ApplyMountFlags(const MountFlags& f, const std::optional<Config>& config, DaemonOptions& o) {
  if (!f.auto_cached_max.empty()) {
    ASSIGN_OR_RETURN(o.auto_cached_max_bytes, ParseSize(f.auto_cached_max));
  }
  if (f.read_mode == "auto") {
    o.read_mode_auto = true;  // decided by the daemon once it knows the dataset's size
  } else if (Result<FuseReadMode> m = ParseFuseReadMode(f.read_mode); m.ok()) {
    o.fuse.read_mode = *m;
  } else {
    return InvalidArgument("--read-mode must be auto, passthrough or cached, not '" + f.read_mode +
                           "'");
  }
  ASSIGN_OR_RETURN(o.fuse.transport, ParseFuseTransport(f.transport));
  ASSIGN_OR_RETURN(o.fuse.passthrough, ParseFusePassthrough(f.passthrough));
  o.fuse.threads = f.fuse_threads;
  o.fuse.allow_other = f.allow_other;
  o.fuse.dir_prefetch = !f.no_dir_prefetch;
  o.fuse.count_file_reads = f.count_file_reads;
  o.fuse.uid = f.uid;
  o.fuse.gid = f.gid;
  o.writable = f.writable || (config && config->writable());
  o.allow_overwrite = f.allow_overwrite;
  o.allow_delete = f.allow_delete;
  o.discard_pending = f.discard_pending;
  if (!f.staging_quota.empty()) {
    ASSIGN_OR_RETURN(o.staging_quota, ParseSize(f.staging_quota));
    if (o.staging_quota == 0) return InvalidArgument("--staging-quota: must be > 0");
  }
  return Status::Ok();
}

// Flags (and --config) -> DaemonOptions. Errors are usage errors.
Result<DaemonOptions> BuildOptions(const MountFlags& f, const GlobalFlags& globals) {
  DaemonOptions o;
  o.dataset.source = f.source;
  o.mountpoint = f.mountpoint;
  ASSIGN_OR_RETURN(Uri uri, ParseUri(f.source));
  ASSIGN_OR_RETURN(o.dataset.ufs, ResolveUfsOptions(uri, globals));
  std::optional<Config> config;
  if (!globals.config_path.empty()) {
    ASSIGN_OR_RETURN(Config c, LoadConfigFile(globals.config_path));
    config = std::move(c);
  }
  RETURN_IF_ERROR(ApplyCacheFlags(f, config, o.dataset));
  RETURN_IF_ERROR(ApplyMountFlags(f, config, o));
  o.push_fetched = !f.no_push_fetched;
  o.run_dir = f.run_dir;
  o.log_file = f.log_file;
  o.foreground = f.foreground;
  o.hold_mount = !f.no_restart;
  o.metrics_addr = f.metrics_addr;
  o.load_on_start = f.load;
  o.load_threads = f.load_threads;
  ASSIGN_OR_RETURN(o.dataset.cluster,
                   BuildClusterOptions(f.cluster, config ? &config->cluster : nullptr));
  return o;
}

// `granary mount --upgrade MOUNTPOINT [--binary PATH]`: the mount's holder
// starts PATH (default: the program at the path this one runs from, i.e. a
// newer file installed there) on the same FUSE connection.
int RunUpgrade(const MountFlags& flags) {
  const std::string what = "mount --upgrade " + flags.upgrade;
  if (!flags.source.empty() || !flags.mountpoint.empty()) {
    return ReportError(what, InvalidArgument("--upgrade takes the mount point only"));
  }
  std::string binary = flags.binary;
  if (binary.empty()) {
    std::error_code ec;
    binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    const std::string kDeleted = " (deleted)";
    if (binary.ends_with(kDeleted)) binary.resize(binary.size() - kDeleted.size());
  } else if (char* real = ::realpath(binary.c_str(), nullptr); real != nullptr) {
    binary = real;
    std::free(real);
  } else {
    return ReportError(what, InvalidArgument("--binary " + flags.binary + " does not exist"));
  }
  struct stat st {};
  if (::stat(binary.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      ::access(binary.c_str(), X_OK) != 0) {
    return ReportError(what, InvalidArgument("--binary " + binary + " is not an executable file"));
  }
  const std::string mp = CanonicalMountpoint(flags.upgrade);
  if (!IsMountpoint(mp)) return ReportError(what, NotFound(mp + " is not mounted"));
  Result<nlohmann::json> reply = AskMountHolder(
      flags.run_dir, mp, {{"op", "upgrade"}, {"binary", binary}}, std::chrono::seconds(300));
  if (!reply.ok()) return ReportError(what, reply.status());
  if (!reply->value("ok", false)) {
    return ReportError(what, IoError(reply->value("error", std::string("the upgrade failed"))));
  }
  std::cout << "upgraded " << mp << ": pid " << reply->value("daemon_pid", 0) << " runs "
            << reply->value("binary", std::string()) << " (" << reply->value("takeover_ms", 0)
            << " ms from the handover request to serving)" << std::endl;
  return kExitOk;
}

int RunMount(const MountFlags& flags, const GlobalFlags& globals) {
  if (!flags.upgrade.empty()) return RunUpgrade(flags);
  if (!flags.binary.empty()) {
    return ReportError("mount", InvalidArgument("--binary goes with --upgrade MOUNTPOINT"));
  }
  if (flags.source.empty() || flags.mountpoint.empty()) {
    return ReportError("mount", InvalidArgument("SOURCE and MOUNTPOINT are required"));
  }
  Result<DaemonOptions> options = BuildOptions(flags, globals);
  if (!options.ok()) return ReportError("mount " + flags.mountpoint, options.status());
  Status s = LaunchDaemon(std::move(*options));
  if (!s.ok()) {
    ReportError("mount " + flags.mountpoint, s);
    return kExitFailure;  // the flags were fine; the mount failed
  }
  return kExitOk;
}

// The dataset's flags, shared by mount and worker.
void AddDatasetFlags(CLI::App* cmd, MountFlags* f) {
  cmd->add_option("--cache-dir", f->cache_dirs,
                  "Cache directory, optionally with a quota (DIR or DIR:200G); repeatable, "
                  "fastest first (default /var/lib/granary/cache)")
      ->option_text("DIR[:QUOTA]");
  cmd->add_option("--cache-size", f->cache_size,
                  "Quota of cache dirs given without one (default: min(100G, 90% of free space))")
      ->option_text("SIZE");
  cmd->add_option("--mem-cache", f->mem_cache, "Memory tier under /dev/shm (0 = none)")
      ->option_text("SIZE");
  cmd->add_option("--policy", f->policy, "lru or training (default lru)")->option_text("POLICY");
  cmd->add_option("--block-size", f->block_size, "Cache block size (default 4MiB)")
      ->option_text("SIZE");
  cmd->add_option("--origin-timeout", f->origin_timeout,
                  "A read waiting longer for the origin fails with EIO (default 60s)")
      ->option_text("DURATION");
  cmd->add_option("--metrics-addr", f->metrics_addr,
                  "Serve Prometheus metrics on HOST:PORT (/metrics)");
  cmd->add_option("--run-dir", f->run_dir, "Directory of pid and stats files")
      ->capture_default_str();
  AddClusterFlags(cmd, &f->cluster);
}

int RunWorker(MountFlags flags, const GlobalFlags& globals) {
  flags.foreground = true;
  Result<DaemonOptions> options = BuildOptions(flags, globals);
  if (!options.ok()) return ReportError("worker", options.status());
  if (!options->dataset.cluster.enabled()) {
    return ReportError("worker", InvalidArgument("a worker needs --cluster-listen HOST:PORT"));
  }
  Status s = LaunchDaemon(std::move(*options));
  if (!s.ok()) {
    ReportError("worker", s);
    return kExitFailure;
  }
  return kExitOk;
}

// One line of a drain's progress ({"state", "elapsed_s", "timeout_s", "waiting"}).
std::string DrainLine(const nlohmann::json& d) {
  char head[96];
  std::snprintf(head, sizeof(head), "drain: %s, %.1f s of %.0f s", d.value("state", "?").c_str(),
                d.value("elapsed_s", 0.0), d.value("timeout_s", 0.0));
  std::string line = head;
  const nlohmann::json waiting = d.value("waiting", nlohmann::json::array());
  if (!waiting.empty()) {
    line += "; waiting for";
    for (const auto& w : waiting) line += " " + w.get<std::string>();
  }
  return line;
}

// `granary worker --drain SOURCE`: asks the worker to leave (the control
// socket's drain op), prints each change of its progress, waits for the
// process to exit and reports the drain's end from its stats file.
int RunDrain(const MountFlags& flags) {
  auto socket = WorkerSocketPath(flags.run_dir, flags.source);
  if (!socket.ok()) return ReportError("worker --drain", socket.status());
  const std::string run_name = WorkerRunName(DatasetId(flags.source));
  auto pid = ReadPidFile(flags.run_dir, run_name);
  if (!pid.ok()) return ReportError("worker --drain", pid.status());
  const nlohmann::json request = {{"v", kControlProtocolVersion}, {"op", "drain"}};
  std::string last;
  for (bool asked = false;; asked = true) {
    auto reply = ControlCall(*socket, request);
    if (!reply.ok()) {
      if (!asked) return ReportError("worker --drain", reply.status());
      break;  // the daemon's socket is gone: the drain ended and the worker is stopping
    }
    const std::string line = DrainLine(reply->value("drain", nlohmann::json::object()));
    if (line != last) std::cout << line << std::endl;
    last = line;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // polling the worker's progress
  }
  // The rest of a stop is bounded (the daemon's shutdown grace).
  const auto until = Clock::Real()->Now() + std::chrono::seconds(60);
  while (PidFileProcessAlive(*pid) && Clock::Real()->Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // waiting for its exit
  }
  if (PidFileProcessAlive(*pid)) {
    return ReportError("worker --drain", Unavailable("the worker (pid " + std::to_string(pid->pid) +
                                                     ") still runs 60 s after its drain ended"));
  }
  std::ifstream in(RunFilePath(flags.run_dir, run_name, "stats.json"));
  const nlohmann::json stats = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  nlohmann::json drain = nlohmann::json::object();
  if (stats.is_object() && stats.contains("cluster")) {
    drain = stats["cluster"].value("drain", nlohmann::json::object());
  }
  std::cout << DrainLine(drain) << "; the worker stopped" << std::endl;
  if (drain.value("state", "") != "drained") {
    return ReportError("worker --drain",
                       Unavailable("the drain did not end with every member taken over"));
  }
  return kExitOk;
}

}  // namespace

void RegisterMountCommand(CLI::App& app, CliContext& ctx) {
  auto f = std::make_shared<MountFlags>();
  CLI::App* cmd = app.add_subcommand("mount", "Mount a dataset read-only through the cache");
  cmd->add_option("SOURCE", f->source, "s3://bucket/prefix, file:///path or a path (required)");
  cmd->add_option("MOUNTPOINT", f->mountpoint, "Existing empty directory (required)");
  AddDatasetFlags(cmd, f.get());
  cmd->add_option("--read-mode", f->read_mode,
                  "auto, passthrough or cached (auto: cached when the dataset fits in the "
                  "memory, else passthrough; see --auto-cached-max)")
      ->capture_default_str();
  cmd->add_option("--auto-cached-max", f->auto_cached_max,
                  "--read-mode auto: largest dataset served in cached mode (default: the "
                  "physical memory)");
  cmd->add_option("--fuse-transport", f->transport, "auto, dev or uring")->capture_default_str();
  cmd->add_option("--passthrough", f->passthrough, "auto, on or off")->capture_default_str();
  cmd->add_flag("--foreground", f->foreground, "Stay in the foreground, log to stderr");
  cmd->add_flag("--no-restart", f->no_restart,
                "No mount holder: the mount dies with its daemon (no restart after a crash, "
                "no --upgrade); implied by --fuse-transport uring");
  cmd->add_option("--upgrade", f->upgrade,
                  "Hand the mount at MOUNTPOINT to a new daemon binary without unmounting "
                  "(no SOURCE; see --binary)")
      ->option_text("MOUNTPOINT");
  cmd->add_option("--binary", f->binary,
                  "--upgrade: the granary binary to run (default: the file at this program's path)")
      ->option_text("PATH");
  cmd->add_option("--log-file", f->log_file,
                  "Log of the background daemon (default RUN_DIR/mount-<id>.log)")
      ->option_text("FILE");
  cmd->add_option("--fuse-threads", f->fuse_threads,
                  "FUSE transport threads on /dev/fuse (0 = one per CPU)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--allow-other", f->allow_other, "Let other users access the mount");
  cmd->add_flag("--no-dir-prefetch", f->no_dir_prefetch,
                "Do not list a directory ahead once files in it are opened by name");
  cmd->add_option("--count-file-reads", f->count_file_reads,
                  "cached read mode: share of time the daemon counts files read from their close "
                  "events, for HIT RATIO (0 = never, 1 = always; each counted close costs its "
                  "reader about 3 us)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag(
      "--no-push-fetched", f->no_push_fetched,
      "cached read mode: do not put loaded files into the mount's page cache as they arrive");
  cmd->add_flag("--writable", f->writable,
                "Accept new files and directories (logs, checkpoints): staged in the cache dir, "
                "uploaded on close and fsync (docs/semantics.md)");
  cmd->add_flag("--allow-overwrite", f->allow_overwrite,
                "--writable: also rewrite or truncate files that came from the origin");
  cmd->add_flag("--allow-delete", f->allow_delete,
                "--writable: also delete files that came from the origin");
  cmd->add_option("--staging-quota", f->staging_quota,
                  "--writable: bytes staged at once before writes get ENOSPC (default 10G)");
  cmd->add_flag("--discard-pending", f->discard_pending,
                "--writable: drop files a crash left staged instead of uploading them");
  cmd->add_option("--uid", f->uid, "Owner shown for every file (default: the mounting user)");
  cmd->add_option("--gid", f->gid, "Group shown for every file (default: the mounting group)");
  cmd->add_flag("--load", f->load,
                "Load the whole dataset into the cache in the background once mounted");
  cmd->add_option("--load-threads", f->load_threads, "Concurrent fetches of --load")
      ->check(CLI::Range(1, 4096));
  cmd->callback([&ctx, f] { ctx.action = [&ctx, f] { return RunMount(*f, ctx.flags); }; });
}

void RegisterWorkerCommand(CLI::App& app, CliContext& ctx) {
  auto f = std::make_shared<MountFlags>();
  CLI::App* cmd = app.add_subcommand(
      "worker", "Serve a dataset's cache to its cluster without a mount (foreground)");
  cmd->add_option("SOURCE", f->source, "s3://bucket/prefix, file:///path or a path")->required();
  AddDatasetFlags(cmd, f.get());
  cmd->add_flag("--drain", f->drain,
                "Make the running worker of SOURCE leave its cluster gracefully: follow its "
                "handover, exit once it stopped (see --run-dir)");
  cmd->callback([&ctx, f] {
    ctx.action = [&ctx, f] { return f->drain ? RunDrain(*f) : RunWorker(*f, ctx.flags); };
  });
}

}  // namespace granary::cli
