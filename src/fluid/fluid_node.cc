// Fluid roles: worker, client, data load (see fluid_node.h).
#include "fluid/fluid_node.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cluster/cluster_node.h"
#include "common/log.h"
#include "common/replace_file.h"
#include "common/units.h"
#include "control/control.h"
#include "control/status.h"
#include "dataset/dataset.h"

namespace granary::fluid {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Quota of a client or data load without a tier of its own: room for the
// snapshot's neighbours and a few near copies, not a cache.
constexpr uint64_t kScratchQuota = 64ull << 20;

// The mount table's entries of opened mounts.
std::vector<UfsMount> TableOf(const std::vector<OpenedMount>& mounts) {
  std::vector<UfsMount> out;
  for (const OpenedMount& m : mounts) out.push_back(m.mount);
  return out;
}

// "train" is the top directory a mount at "train/x" appears under.
std::string TopDir(const std::string& path) { return path.substr(0, path.find('/')); }

// Whether dataset paths `a` and `b` ("imagenet/train", "" = the root) are
// one inside the other.
bool Nested(const std::string& a, const std::string& b) {
  return a.empty() || b.empty() || a == b || a.starts_with(b + "/") || b.starts_with(a + "/");
}

// "/imagenet/train/" -> "imagenet/train".
std::string DatasetPath(std::string path) {
  while (path.starts_with("/")) path.erase(0, 1);
  while (path.ends_with("/")) path.pop_back();
  return path;
}

// Opens mounts[index]'s connector and proves it answers (a List of its prefix).
Result<OpenedMount> OpenMount(const FluidMount& spec, size_t index) {
  const std::string what = "mounts[" + std::to_string(index) + "] (" +
                           (spec.name.empty() ? "/" + spec.path : spec.name) + ") " +
                           spec.uri.ToString();
  auto ufs = OpenUnderStorage(spec.uri, spec.ufs);
  if (!ufs.ok()) return ufs.status().WithContext(what);
  std::shared_ptr<UnderStorage> shared = std::move(*ufs);
  std::string prefix = spec.uri.key;
  if (!prefix.empty() && !prefix.ends_with("/")) prefix += "/";
  // Usable now: a missing bucket, refused credentials or an unreachable
  // endpoint fail here, naming the mount.
  auto page = shared->List(ListRequest{.prefix = prefix, .max_keys = 1});
  if (!page.ok()) return page.status().WithContext(what);
  return OpenedMount{.spec = spec,
                     .mount = UfsMount{.path = spec.path, .ufs = shared, .prefix = prefix}};
}

// The tiers of a role: worker tiers; the client's own (near copies) or a
// small scratch dir under the run dir.
std::vector<TierLevel> RoleTiers(const FluidRuntime& rt, Role role, const std::string& run_dir) {
  const std::vector<TierLevel>& own = role == Role::kWorker   ? rt.worker.tiers
                                      : role == Role::kClient ? rt.client.tiers
                                                              : std::vector<TierLevel>{};
  if (!own.empty()) return own;
  if (role == Role::kWorker) {
    GLOG_WARN("worker.tieredStoreLevels is empty: caching under /var/lib/granary/cache");
    return {TierLevel{.path = "/var/lib/granary/cache"}};
  }
  return {TierLevel{.path = run_dir + "/" + std::string(RoleName(role)) + "-scratch",
                    .quota = kScratchQuota}};
}

// Whether the snapshot's top level matches the mount table (a pod restarted
// after Fluid changed the mounts serves a stale snapshot otherwise).
bool SnapshotMatches(const Snapshot& snap, const std::vector<OpenedMount>& mounts) {
  for (const OpenedMount& m : mounts) {
    if (m.spec.path.empty()) return true;  // one mount at the root
  }
  std::set<std::string> want;
  for (const OpenedMount& m : mounts) want.insert(TopDir(m.spec.path));
  std::set<std::string> have;
  for (const EntryView& e : snap.ReadDir(1, 0, want.size() + 1)) have.insert(std::string(e.name));
  for (const std::string& h : have) {
    if (!want.contains(h)) return false;  // a removed mount
  }
  for (const OpenedMount& m : mounts) {
    if (have.contains(TopDir(m.spec.path))) continue;
    // An added mount, unless it is empty (an empty mount shows no directory).
    auto page = m.mount.ufs->List(ListRequest{.prefix = m.mount.prefix, .max_keys = 1});
    if (!page.ok() || !page->objects.empty() || !page->common_prefixes.empty()) return false;
  }
  return true;
}

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kWorker: return "worker";
    case Role::kClient: return "client";
    case Role::kDataLoad: return "dataload";
  }
  return "?";
}

Result<std::vector<OpenedMount>> OpenMounts(const FluidRuntime& rt,
                                            const std::vector<OpenedMount>& reuse) {
  std::vector<OpenedMount> out;
  for (size_t i = 0; i < rt.mounts.size(); ++i) {
    const FluidMount& spec = rt.mounts[i];
    auto same = std::find_if(reuse.begin(), reuse.end(),
                             [&](const OpenedMount& r) { return r.spec == spec; });
    if (same != reuse.end()) {
      out.push_back(*same);
      continue;
    }
    ASSIGN_OR_RETURN(OpenedMount opened, OpenMount(spec, i));
    out.push_back(std::move(opened));
  }
  return out;
}

Result<std::string> ClientMountpoint(const FluidRuntime& rt, const FluidRunOptions& options) {
  std::string mp = options.mountpoint;
  if (mp.empty()) {
    const char* env = std::getenv("FLUID_RUNTIME_MOUNT_PATH");
    mp = env && *env ? env : rt.target_path;
  }
  if (mp.empty()) {
    return InvalidArgument(
        "client: no mount point ($FLUID_RUNTIME_MOUNT_PATH and targetPath "
        "are empty)");
  }
  return mp;
}

Result<DaemonOptions> BuildDaemonOptions(const FluidRuntime& rt, Role role,
                                         const FluidRunOptions& options,
                                         std::shared_ptr<UnderStorage> table) {
  const std::map<std::string, std::string> opts = RoleOptions(rt, role);
  DaemonOptions o;
  o.dataset.source = DatasetSource(rt);
  o.dataset.origin = std::move(table);
  o.dataset.cache_dirs = RoleTiers(rt, role, options.run_dir);
  if (const std::string v = OptionOr(opts, "policy"); !v.empty()) o.dataset.policy = v;
  if (const std::string v = OptionOr(opts, "blockSize"); !v.empty()) {
    auto b = ParseSize(v);
    if (!b.ok() || *b == 0) return InvalidArgument("option blockSize '" + v + "': expected a size");
    o.dataset.block_size = *b;
  }
  if (const std::string v = OptionOr(opts, "originConcurrency"); !v.empty()) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 4096) {
      return InvalidArgument("option originConcurrency '" + v + "': expected 1..4096");
    }
    o.dataset.engine.origin_concurrency = static_cast<int>(n);
  }
  ASSIGN_OR_RETURN(o.dataset.cluster, BuildClusterOptions(rt, role, options.pod));
  o.run_dir = options.run_dir;
  o.foreground = true;
  o.metrics_addr = OptionOr(opts, "metricsAddr");
  if (role == Role::kClient) {
    // The Dataset's accessModes: ReadWriteMany / ReadWriteOnce -> a writable mount.
    for (const std::string& m : rt.access_modes) {
      if (m == "ReadWriteMany" || m == "ReadWriteOnce") o.writable = true;
    }
    ASSIGN_OR_RETURN(o.mountpoint, ClientMountpoint(rt, options));
    o.holder = options.holder;
    std::error_code ec;
    fs::create_directories(o.mountpoint, ec);  // Fluid's target path may not exist yet
    o.fuse.allow_other = true;                 // the application pods' users read through it
    const std::string mode = OptionOr(opts, "readMode");
    if (mode.empty() || mode == "auto") {
      o.read_mode_auto = true;
    } else if (auto m = ParseFuseReadMode(mode); m.ok()) {
      o.fuse.read_mode = *m;
    } else {
      return InvalidArgument("option readMode '" + mode +
                             "': expected auto, passthrough or cached");
    }
  }
  RETURN_IF_ERROR(o.Validate());
  return o;
}

std::string StatePath(const std::string& run_dir, Role role, const std::string& source) {
  return run_dir + "/fluid-" + std::string(RoleName(role)) + "-" + DatasetId(source) + ".json";
}

Result<json> ReadState(const std::string& run_dir, Role role, const std::string& source) {
  const std::string path = StatePath(run_dir, role, source);
  std::ifstream in(path);
  if (!in) {
    return NotFound("no granary fluid " + std::string(RoleName(role)) + " runs here (no " + path +
                    ")");
  }
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corruption(path + ": not a JSON object");
  const pid_t pid = j.value("pid", 0);
  const uint64_t start = j.value("start_ticks", uint64_t{0});
  if (!PidFileProcessAlive(DaemonPidInfo{.pid = pid, .start_ticks = start})) {
    return Unavailable("the granary fluid " + std::string(RoleName(role)) + " (pid " +
                       std::to_string(pid) + ") is not running");
  }
  return j;
}

Result<std::unique_ptr<FluidServer>> FluidServer::Start(Role role, FluidRunOptions options) {
  if (role == Role::kDataLoad) return InvalidArgument("a data load is not a server");
  std::unique_ptr<FluidServer> s(new FluidServer(role, std::move(options)));
  ASSIGN_OR_RETURN(s->config_text_, ReadRuntimeConfigText(s->options_.config_path));
  ASSIGN_OR_RETURN(s->runtime_, ParseRuntimeConfig(s->config_text_, s->options_.config_path));
  s->source_ = DatasetSource(s->runtime_);
  ASSIGN_OR_RETURN(s->mounts_, OpenMounts(s->runtime_));
  ASSIGN_OR_RETURN(std::unique_ptr<MountTableUfs> t,
                   MountTableUfs::Make(s->source_, TableOf(s->mounts_)));
  s->table_ = std::move(t);
  ASSIGN_OR_RETURN(DaemonOptions d, BuildDaemonOptions(s->runtime_, role, s->options_, s->table_));
  ASSIGN_OR_RETURN(s->daemon_, Daemon::Start(std::move(d)));
  if (!SnapshotMatches(*s->daemon_->snapshot(), s->mounts_)) {
    GLOG_INFO("fluid: the cached snapshot predates the current mounts; listing them again");
    RETURN_IF_ERROR(s->daemon_->Sync().status());
  }
  s->WriteState(true, "");
  GLOG_INFO("fluid {}: serving {} mount(s) of {}", RoleName(role), s->mounts_.size(), s->source_);
  s->watcher_ = std::thread([self = s.get()] { self->WatchLoop(); });
  return s;
}

FluidServer::~FluidServer() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (watcher_.joinable()) watcher_.join();
}

Status FluidServer::Run() {
  Status s = daemon_->Run();
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (watcher_.joinable()) watcher_.join();
  std::error_code ec;
  fs::remove(StatePath(options_.run_dir, role_, source_), ec);
  return s;
}

void FluidServer::RequestStop() { daemon_->RequestStop(); }

void FluidServer::WatchLoop() {
  MutexLock lock(mu_);
  while (!cv_.WaitFor(lock, options_.watch_interval, [this]() REQUIRES(mu_) { return stop_; })) {
    lock.Unlock();
    // Fluid updates the ConfigMap by swapping a symlink: read the content,
    // not the inode or mtime.
    auto text = ReadRuntimeConfigText(options_.config_path);
    if (text.ok() && *text != config_text_) {
      config_text_ = *text;
      auto next = ParseRuntimeConfig(*text, options_.config_path);
      Status s = next.ok() ? Apply(*next) : next.status();
      if (!s.ok()) {
        GLOG_ERROR("fluid: runtime config changed but cannot be applied: {}", s.ToString());
        WriteState(false, s.ToString());
      } else {
        WriteState(true, "");
      }
    }
    lock.Lock();
  }
}

Status FluidServer::ApplyMembers(const FluidRuntime& next) {
  // With etcd the workers register themselves: the list says nothing.
  if (!OptionOr(RoleOptions(next, role_), "etcd").empty()) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<std::string> was, WorkerAddresses(runtime_.worker));
  ASSIGN_OR_RETURN(std::vector<std::string> now, WorkerAddresses(next.worker));
  if (was != now) {
    std::string list;
    for (const std::string& m : now) list += (list.empty() ? "" : ",") + m;
    if (ClusterNode* cluster = daemon_->dataset().cluster()) {
      RETURN_IF_ERROR(cluster->SetPeers(list).status().WithContext("the new worker list"));
    }
    GLOG_INFO("fluid: {} workers now ({} before)", now.size(), was.size());
  }
  runtime_.worker.replicas = next.worker.replicas;
  if (auto it = next.worker.options.find("peers"); it != next.worker.options.end()) {
    runtime_.worker.options["peers"] = it->second;
  } else {
    runtime_.worker.options.erase("peers");
  }
  return Status::Ok();
}

Status FluidServer::Apply(const FluidRuntime& next) {
  // The member set first: a scale-out or scale-in is applied now, handed
  // over as an etcd change is.
  RETURN_IF_ERROR(ApplyMembers(next));
  bool same_mounts = next.mounts.size() == runtime_.mounts.size();
  for (size_t i = 0; same_mounts && i < next.mounts.size(); ++i) {
    same_mounts = next.mounts[i] == runtime_.mounts[i];
  }
  const FluidComponent& a = role_ == Role::kWorker ? runtime_.worker : runtime_.client;
  const FluidComponent& b = role_ == Role::kWorker ? next.worker : next.client;
  if ((role_ == Role::kClient && a.replicas != b.replicas) || a.options != b.options ||
      a.tiers.size() != b.tiers.size()) {
    GLOG_WARN("fluid: the runtime's {} settings changed; they apply when the pod restarts",
              RoleName(role_));
  }
  if (same_mounts) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<OpenedMount> opened, OpenMounts(next, mounts_));
  RETURN_IF_ERROR(table_->SetMounts(TableOf(opened)));
  auto synced = daemon_->Sync();
  if (!synced.ok()) {
    // Back to the mounts the snapshot shows.
    table_->SetMounts(TableOf(mounts_)).IgnoreError();
    return synced.status().WithContext("listing the new mounts");
  }
  mounts_ = std::move(opened);
  runtime_.mounts = next.mounts;
  GLOG_INFO("fluid: mounts now {} ({} files: {} added, {} removed)", mounts_.size(), synced->files,
            synced->added, synced->removed);
  return Status::Ok();
}

void FluidServer::WriteState(bool ready, const std::string& error) {
  std::error_code ec;
  fs::create_directories(options_.run_dir, ec);
  json mounted = json::array();
  for (const OpenedMount& m : mounts_) mounted.push_back("/" + m.spec.path);
  const std::string run_name = daemon_->run_name();
  json j = {{"pid", static_cast<int64_t>(::getpid())},
            {"start_ticks", ProcessStartTicks(::getpid())},
            {"role", RoleName(role_)},
            {"source", source_},
            {"dataset_id", daemon_->dataset_id()},
            {"control_socket", DaemonSocketPath(options_.run_dir, run_name)},
            {"mountpoint", daemon_->mountpoint()},
            {"mounted", mounted},
            {"ready", ready},
            {"error", error}};
  if (Status s = ReplaceFileContents(StatePath(options_.run_dir, role_, source_), j.dump() + "\n");
      !s.ok()) {
    GLOG_WARN("fluid: writing the state file: {}", s.ToString());
  }
}

Result<LoadResult> RunDataLoad(const FluidRuntime& rt, const FluidRunOptions& options,
                               const std::vector<std::string>& paths,
                               const std::vector<int>& replicas, int threads,
                               const std::function<void(const std::string&)>& progress) {
  std::vector<std::string> targets;
  for (const std::string& p : paths) targets.push_back(DatasetPath(p));
  // The Job may not reach every mount (a pvc:// claim is mounted into the
  // workers, not into Fluid's DataLoad pod): a mount it cannot open is left
  // out unless a target lies under it.
  std::vector<OpenedMount> mounts;
  for (size_t i = 0; i < rt.mounts.size(); ++i) {
    const FluidMount& spec = rt.mounts[i];
    auto opened = OpenMount(spec, i);
    if (opened.ok()) {
      mounts.push_back(std::move(*opened));
      continue;
    }
    for (const std::string& t : targets) {
      if (!Nested(t, spec.path)) continue;
      return Status(opened.status().code(),
                    "target /" + t +
                        " lies in a mount this pod cannot open: " + opened.status().message() +
                        " (mount its secrets/claim into the DataLoad pod, or run `granary load "
                        "--worker " +
                        DatasetSource(rt) + " " + spec.path + "` in a worker)");
    }
    progress("dataload: skipping mount /" + spec.path +
             " (no target under it; cannot be opened here: " + opened.status().message() + ")");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MountTableUfs> t,
                   MountTableUfs::Make(DatasetSource(rt), TableOf(mounts)));
  ASSIGN_OR_RETURN(DaemonOptions d, BuildDaemonOptions(rt, Role::kDataLoad, options, std::move(t)));
  for (int r : replicas) {
    if (r > d.dataset.cluster.replicas) {
      progress("dataload: " + std::to_string(r) + " replicas asked, the runtime keeps " +
               std::to_string(d.dataset.cluster.replicas) + " (option cacheReplicas)");
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, Dataset::Open(std::move(d.dataset)));
  std::shared_ptr<const Snapshot> snap = ds->snapshot();
  // Every target's files, once, in one job.
  LoadTargets all;
  for (size_t i = 0; i < targets.size(); ++i) {
    auto one = ResolveLoadTargets(*snap, LoadRequest{.path = targets[i], .threads = threads});
    if (!one.ok()) return one.status().WithContext("dataload " + paths[i]);
    progress("dataload: " + paths[i] + ": " + std::to_string(one->inos.size()) + " files, " +
             FormatSize(one->bytes));
    all.inos.insert(all.inos.end(), one->inos.begin(), one->inos.end());
  }
  std::sort(all.inos.begin(), all.inos.end());
  all.inos.erase(std::unique(all.inos.begin(), all.inos.end()), all.inos.end());
  for (uint64_t ino : all.inos) all.bytes += snap->Get(ino)->size;
  LoadJob job(&ds->engine(), snap, std::move(all), threads, /*check_only=*/false);
  job.Start();
  while (!job.WaitFor(std::chrono::seconds(2))) {
    const LoadProgress p = job.progress();
    progress("dataload: " + std::to_string(p.files_done) + "/" + std::to_string(p.files_total) +
             " files, " + FormatSize(static_cast<uint64_t>(p.bytes_per_s)) + "/s");
  }
  LoadResult result = job.Wait();
  RETURN_IF_ERROR(ds->Close());
  std::error_code ec;
  fs::remove_all(options.run_dir + "/dataload-scratch", ec);
  return result;
}

Result<json> ReportSummaryFromTotals(const json& totals) {
  if (!totals.is_object()) return InvalidArgument("cluster status: no totals");
  auto num = [&](const char* key) -> Result<double> {
    auto it = totals.find(key);
    if (it == totals.end() || !it->is_number()) {
      return InvalidArgument(std::string("cluster status: totals.") + key + " missing");
    }
    return it->get<double>();
  };
  auto u64 = [&](const char* key) -> Result<uint64_t> {
    auto it = totals.find(key);
    if (it == totals.end() || !it->is_number_unsigned()) {
      if (it != totals.end() && it->is_number_integer() && it->get<int64_t>() >= 0) {
        return static_cast<uint64_t>(it->get<int64_t>());
      }
      return InvalidArgument(std::string("cluster status: totals.") + key + " missing");
    }
    return it->get<uint64_t>();
  };
  ASSIGN_OR_RETURN(uint64_t cached, u64("cached_bytes"));
  ASSIGN_OR_RETURN(uint64_t capacity, u64("capacity"));
  ASSIGN_OR_RETURN(uint64_t files, u64("ufs_files"));
  ASSIGN_OR_RETURN(uint64_t ufs, u64("ufs_total_bytes"));
  ASSIGN_OR_RETURN(double hit, num("hit_ratio_reads"));
  // Percentages as Fluid's example writes them: "12.3" (no sign); 100.0
  // only when everything is cached, never by rounding.
  auto pct = [](double ratio, bool exact_full) {
    double v = std::floor(ratio * 1000.0) / 10.0;
    if (exact_full) v = 100.0;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return std::string(buf);
  };
  const double cached_ratio =
      ufs == 0 ? 1.0 : static_cast<double>(cached) / static_cast<double>(ufs);
  return json{{"cached", FluidSize(cached)},
              {"cachedPercentage", pct(std::min(cached_ratio, 1.0), cached >= ufs)},
              {"cacheCapacity", FluidSize(capacity)},
              {"cacheHitRatio", pct(hit, false)},
              {"fileNum", std::to_string(files)},
              {"ufsTotal", FluidSize(ufs)}};
}

}  // namespace granary::fluid
