// Daemon: start-up checks, wiring, signal handling and clean shutdown (see daemon.h).
#include "daemon/daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/engine_stats_json.h"
#include "cluster/cluster_stats_json.h"
#include "common/log.h"
#include "common/replace_file.h"
#include "common/uri.h"
#include "daemon/control_service.h"
#include "daemon/holder_channel.h"
#include "daemon/mount_holder.h"
#include "fuse/engine_fs.h"
#include "fuse/fuse_connection_state.h"
#include "fuse/fuse_stats_json.h"
#include "store/store_stats_json.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

// Signals the daemon handles on its signal thread.
sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigaddset(&set, SIGHUP);
  return set;
}

// How long a daemon handing its connection over waits for the requests it
// is serving; what is left is resent to its successor.
constexpr std::chrono::seconds kHandoverDrain{3};

// The mount point exists, is a directory, is not a mount yet, and is empty.
Status CheckMountpoint(const std::string& mp, bool allow_non_empty) {
  struct stat st {};
  if (::stat(mp.c_str(), &st) != 0) {
    if (errno == ENOTCONN)
      return InvalidArgument("mount point " + mp +
                             " is already mounted (dead mount: run 'granary umount " + mp + "')");
    if (errno == ENOENT) return NotFound("mount point " + mp + " does not exist");
    return ErrnoStatus("mount point " + mp, errno);
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("mount point " + mp + " is not a directory");
  if (IsMountpoint(mp)) return InvalidArgument("mount point " + mp + " is already mounted");
  if (allow_non_empty) return Status::Ok();
  DIR* d = ::opendir(mp.c_str());
  if (d == nullptr) return ErrnoStatus("mount point " + mp, errno);
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  if (!empty) return InvalidArgument("mount point " + mp + " is not empty");
  return Status::Ok();
}

}  // namespace

Status DaemonOptions::Validate() const {
  RETURN_IF_ERROR(dataset.Validate());
  if (run_dir.empty()) return InvalidArgument("run_dir: required");
  if (mountpoint.empty() && !dataset.cluster.enabled()) {
    return InvalidArgument("a worker (no mount point) needs a cluster: --cluster-listen");
  }
  if ((allow_overwrite || allow_delete || discard_pending) && !writable) {
    return InvalidArgument(
        "--allow-overwrite, --allow-delete and --discard-pending need --writable");
  }
  if (writable && mountpoint.empty())
    return InvalidArgument("--writable: a worker has no mount to write through");
  if (writable && fuse.transport == FuseTransport::kUring) {
    return InvalidArgument(
        "--writable: --fuse-transport uring does not carry writes yet; use auto or dev");
  }
  return Status::Ok();
}

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  RETURN_IF_ERROR(options.Validate());
  if (options.handle_signals) {
    // Before any thread exists, so that every thread inherits the mask and
    // only the signal thread receives these signals.
    sigset_t set = HandledSignals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  std::unique_ptr<Daemon> d(new Daemon(std::move(options)));
  if (Status s = d->Open(); !s.ok()) {
    d->Shutdown().IgnoreError();
    return s;
  }
  return d;
}

uint64_t AutoCachedMaxBytes(uint64_t cached_max_bytes, uint64_t physical_bytes) {
  return cached_max_bytes != 0 ? cached_max_bytes : physical_bytes;
}

FuseReadMode AutoReadMode(uint64_t dataset_bytes, uint64_t cached_max_bytes,
                          uint64_t physical_bytes, bool passthrough_required) {
  const uint64_t limit = AutoCachedMaxBytes(cached_max_bytes, physical_bytes);
  return !passthrough_required && dataset_bytes <= limit ? FuseReadMode::kCached
                                                         : FuseReadMode::kPassthrough;
}

namespace {
uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
}
}  // namespace

bool Daemon::StreamsPastMemory(const Snapshot& snap) const {
  return options_.fuse.read_mode == FuseReadMode::kPassthrough &&
         snap.total_bytes() >
             AutoCachedMaxBytes(options_.auto_cached_max_bytes, PhysicalMemoryBytes());
}

void Daemon::ResolveAutoReadMode(const Snapshot& snap) {
  DaemonOptions& o = options_;
  const uint64_t physical = PhysicalMemoryBytes();
  const uint64_t limit = AutoCachedMaxBytes(o.auto_cached_max_bytes, physical);
  const uint64_t total = snap.total_bytes();
  const bool required = o.fuse.passthrough == FusePassthrough::kOn;
  o.fuse.read_mode = AutoReadMode(total, o.auto_cached_max_bytes, physical, required);
  GLOG_INFO("read mode auto: {} ({} bytes of data, {} than {} bytes{})",
            FuseReadModeName(o.fuse.read_mode), total, total <= limit ? "not more" : "more", limit,
            required ? "; --passthrough on" : "");
}

Status Daemon::Open() {
  DaemonOptions& o = options_;
  if (!o.dataset.origin) {
    // A caller-made origin (Fluid's mount table) is named, not parsed.
    ASSIGN_OR_RETURN(Uri uri, ParseUri(o.dataset.source));
    o.dataset.source = uri.ToString();
  }
  if (o.holder && !is_worker()) {
    ASSIGN_OR_RETURN(std::optional<HeldConnection> held, o.holder->Hello());
    if (held) {
      held_ = std::make_unique<HeldConnection>(std::move(*held));
      // The kernel has been told this read mode (cached: no OPEN at all).
      o.read_mode_auto = false;
      o.fuse.read_mode = held_->state.read_mode;
    }
  }
  if (!is_worker()) {
    o.mountpoint = CanonicalMountpoint(o.mountpoint);
    if (!held_) RETURN_IF_ERROR(CheckMountpoint(o.mountpoint, o.fuse.allow_non_empty));
  }
  run_name_ = is_worker() ? WorkerRunName(DatasetId(o.dataset.source)) : o.mountpoint;
  if (auto pid = ReadPidFile(o.run_dir, run_name_);
      !o.holder && pid.ok() && PidFileProcessAlive(*pid)) {
    return InvalidArgument((is_worker() ? "dataset " + o.dataset.source + " already has a worker"
                                        : "mount point " + o.mountpoint) +
                           " served by granary (pid " + std::to_string(pid->pid) + ")");
  }
  RETURN_IF_ERROR(PrepareWritableDir(o.run_dir, "run directory"));

  DatasetOptions dataset_opts = o.dataset;
  // Taking over a live mount: readers wait on us, and the origin may be
  // down or stalled (the snapshot and the cache on disk serve without it).
  if (held_) dataset_opts.probe_source = false;
  if (!is_worker()) {
    // The read mode depends on the dataset's size; the store needs it.
    dataset_opts.drop_read_pages = [this](const Snapshot& snap) {
      if (options_.read_mode_auto) ResolveAutoReadMode(snap);
      // Cached read mode: the mount's page cache keeps the copy. Passthrough
      // over more data than memory: what a cold epoch writes to the cache
      // files cannot stay in the page cache until the next epoch anyway, so
      // the cold epoch streams as a cached mount's does -- blocks pushed into
      // the mount's page cache ahead of the reader, cache files written
      // around the page cache (2.2x less daemon CPU per GiB, admission done
      // with the epoch).
      streams_past_memory_ = StreamsPastMemory(snap);
      return options_.fuse.read_mode == FuseReadMode::kCached || streams_past_memory_;
    };
  }
  ASSIGN_OR_RETURN(dataset_, Dataset::Open(std::move(dataset_opts)));
  if (!is_worker()) RETURN_IF_ERROR(StartMount());

  if (!o.holder) {
    std::string pid_text = std::to_string(::getpid()) + "\n" + run_name_ + "\n" + source() + "\n" +
                           std::to_string(ProcessStartTicks(::getpid())) + "\n";
    RETURN_IF_ERROR(ReplaceFileContents(pid_path(), pid_text));
  }
  std::function<FuseStats()> fuse_stats;
  if (!is_worker()) fuse_stats = [this] { return fuse_->stats(); };
  ASSIGN_OR_RETURN(
      services_,
      StartServices(&dataset_->engine(),
                    ServicesOptions{
                        .run_dir = o.run_dir,
                        .mountpoint = run_name_,
                        .read_mode = is_worker() ? std::string()
                                                 : std::string(FuseReadModeName(o.fuse.read_mode)),
                        .metrics_addr = o.metrics_addr,
                        .load_on_start = o.load_on_start,
                        .load_threads = o.load_threads,
                        .cluster = dataset_->cluster(),
                        .write_stats = overlay_ ? std::function<OverlayStats()>(
                                                      [ov = overlay_.get()] { return ov->stats(); })
                                                : std::function<OverlayStats()>(),
                        .request_drain = [this] { return RequestDrain(); }},
                    std::move(fuse_stats), [this]() -> Result<nlohmann::json> {
                      ASSIGN_OR_RETURN(SyncResult r, Sync());
                      return SyncResultToJson(r);
                    }));
  if (!is_worker()) {
    unmount_watcher_ = std::thread([this] {
      fuse_->Wait();
      RequestStop();
    });
  }
  if (o.handle_signals) signal_thread_ = std::thread([this] { SignalLoop(); });
  serving_ = true;
  if (is_worker()) {
    GLOG_INFO("worker for {} (dataset {}) serving peers", source(), dataset_id());
  } else {
    GLOG_INFO("mounted {} on {} (dataset {}, transport {}, passthrough {})", source(), o.mountpoint,
              dataset_id(), FuseTransportName(fuse_->session().transport),
              fuse_->session().passthrough ? "on" : "off");
  }
  return Status::Ok();
}

Status Daemon::StartMount() {
  DaemonOptions& o = options_;
  CacheEngine& engine = dataset_->engine();
  const bool offer =
      o.fuse.read_mode == FuseReadMode::kPassthrough && o.fuse.passthrough != FusePassthrough::kOff;
  EngineFsOptions fs_opts{.offer_backing = offer};
  if (o.writable) {
    if (dataset_->ufs().Root().starts_with("http")) {
      return InvalidArgument("--writable: " + dataset_->ufs().Root() +
                             " is an HTTP origin, which is read-only");
    }
    OverlayOptions ov{.staging_dir = dataset_->dir() + "/staging",
                      .prefix = dataset_->snapshot()->prefix(),
                      .quota = o.staging_quota > 0 ? o.staging_quota : kDefaultStagingQuota,
                      .discard_pending = o.discard_pending};
    ASSIGN_OR_RETURN(overlay_, Overlay::Open(std::move(ov), dataset_->shared_ufs()));
    fs_opts.overlay = overlay_.get();
    fs_opts.allow_overwrite = o.allow_overwrite;
    fs_opts.allow_delete = o.allow_delete;
    OverlayStats st = overlay_->stats();
    if (st.pending_files > 0) {
      GLOG_INFO("staging: {} files ({} bytes) written before a crash are uploaded now",
                st.pending_files, st.pending_bytes);
      recover_thread_ = std::thread([ov = overlay_.get()] {
        Status s = ov->RecoverPending();
        if (!s.ok())
          GLOG_WARN("staging: {} (they stay staged; `granary status` lists them)", s.ToString());
      });
    }
  }
  if (held_) fs_opts = ContinuedNumbering(fs_opts);
  fs_ = std::make_unique<EngineFs>(&engine, fs_opts);
  if (o.holder) SaveNumbering();
  if (o.holder && overlay_) {
    // The kernel's ids of new files must keep naming them in a successor.
    RETURN_IF_ERROR(fs_->OpenOverlayNodeJournal(
        RunFilePath(o.run_dir, o.mountpoint, "overlay-nodes"), /*restore=*/held_ != nullptr));
  }
  if ((o.fuse.read_mode == FuseReadMode::kCached || streams_past_memory_) && o.push_fetched) {
    // The mount keeps file pages across opens: bytes fetched ahead of their
    // reader (warm-up, readahead) go straight into its page cache, so that
    // reader needs no READ, and the cache file needs no page-cache copy.
    // (Passthrough: while a file is not completely cached, its reads come
    // through the mount too.)
    engine.SetFetchedHook(
        [this](const Snapshot& snap, uint64_t ino, uint64_t offset, std::string_view bytes) {
          return PushFetched(snap, ino, offset, bytes);
        });
  }
  FuseOptions fuse_opts = o.fuse;
  fuse_opts.mountpoint = o.mountpoint;
  fuse_opts.writable = o.writable;
  // FUSE-over-io_uring puts the names of CREATE/MKDIR and the data of WRITE
  // where this transport does not read them yet: writable mounts use /dev/fuse.
  if (o.writable) fuse_opts.transport = FuseTransport::kDev;
  fuse_opts.fsname = "granary";
  if (o.holder) {
    // io_uring rings belong to the process that registered them.
    if (fuse_opts.transport == FuseTransport::kUring) {
      return InvalidArgument(
          "--fuse-transport uring: a mount that outlives its daemon uses "
          "/dev/fuse; mount with --no-restart to use io_uring");
    }
    fuse_opts.transport = FuseTransport::kDev;
    fuse_opts.backing_journal = RunFilePath(o.run_dir, o.mountpoint, "backing");
  }
  fuse_ = std::make_unique<FuseServer>(fs_.get(), fuse_opts);
  if (held_) {
    std::vector<int> fds = std::move(held_->fds);
    held_->fds.clear();
    return fuse_->Resume(held_->state, std::move(fds));
  }
  RETURN_IF_ERROR(fuse_->Start());
  if (o.holder) {
    Status s = o.holder->SendSession(fuse_->connection_state(), fuse_->device_fds());
    if (!s.ok()) return s.WithContext("handing the connection to the mount holder");
  }
  return Status::Ok();
}

void Daemon::SaveNumbering() {
  const NodeNumbering n = fs_->numbering();
  const nlohmann::json j = {{"version", n.version}, {"base", n.base}, {"next_base", n.next_base}};
  Status s = ReplaceFileContents(RunFilePath(options_.run_dir, options_.mountpoint, "nodes"),
                                 j.dump() + "\n");
  if (!s.ok()) GLOG_WARN("node numbering: {} (a restarted daemon may answer ESTALE)", s.ToString());
}

EngineFsOptions Daemon::ContinuedNumbering(EngineFsOptions options) const {
  const std::string path = RunFilePath(options_.run_dir, options_.mountpoint, "nodes");
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return options;  // the first daemon died before writing it: ids = inodes
  const uint64_t version = j.value("version", uint64_t{0});
  const uint64_t base = j.value("base", uint64_t{0});
  const uint64_t next_base = j.value("next_base", uint64_t{0});
  if (dataset_->snapshot()->version() == version) {
    options.base = base;
    options.stale_below = base;
  } else {
    // A sync the previous daemon made was not recorded yet: it numbered
    // the new version from next_base, as this does; ids of older versions
    // answer ESTALE (never another file's bytes).
    options.base = next_base;
    options.stale_below = next_base;
  }
  if (options.base != 0) {
    GLOG_INFO("node ids continue from the previous daemon (snapshot version {}, base {})",
              dataset_->snapshot()->version(), options.base);
  }
  return options;
}

bool Daemon::PushFetched(const Snapshot& snap, uint64_t ino, uint64_t offset,
                         std::string_view bytes) {
  if (detaching_.load()) return false;  // listing through the mount would wait for the successor
  const uint64_t node = fs_->NodeOf(snap, ino);
  if (node == 0) return false;
  Result<bool> stored = fuse_->StoreData(node, offset, bytes);
  if (!stored.ok()) return false;
  if (*stored) return true;
  // The kernel has not met this file: a warm-up started before the reader
  // listed the tree. Listing its directory through the mount (READDIRPLUS;
  // this is a fetching thread, not a FUSE one) introduces every file in it,
  // this one included. One thread lists a directory, once; the others
  // fetching files of it wait for that listing, then try again.
  if (&snap != dataset_->snapshot().get()) return false;  // the root shows the current version
  std::string path = snap.Path(ino);
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash);
  const std::string listed_key = std::to_string(snap.version()) + ":" + dir;
  bool lister = false;
  {
    MutexLock lock(push_mu_);
    lister = push_listed_.try_emplace(listed_key, false).second;
    if (!lister) push_cv_.Wait(lock, [&]() REQUIRES(push_mu_) { return push_listed_[listed_key]; });
  }
  if (lister) {
    fuse_->ListDir(dir);
    {
      MutexLock lock(push_mu_);
      push_listed_[listed_key] = true;
    }
    push_cv_.NotifyAll();
  }
  stored = fuse_->StoreData(node, offset, bytes);
  return stored.ok() && *stored;
}

Result<SyncResult> Daemon::Sync() {
  return dataset_->Sync([this](const std::shared_ptr<const Snapshot>& next, SyncResult& r) {
    if (!fs_) return;  // a worker: no kernel names to invalidate
    std::vector<std::string> names = fs_->AddVersion(next);
    if (options_.holder) SaveNumbering();
    for (const std::string& name : names) {
      if (Status s = fuse_->InvalidateEntry(kRootIno, name); !s.ok()) {
        GLOG_WARN("sync: {}", s.ToString());
      } else {
        ++r.invalidated_names;
      }
    }
    if (Status s = fuse_->InvalidateNode(kRootIno); !s.ok()) GLOG_WARN("sync: {}", s.ToString());
    if (overlay_) {
      // Uploaded files the new version lists are served by the snapshot now.
      overlay_->Fold([&next](const std::string& path) { return next->FindPath(path).has_value(); });
    }
  });
}

void Daemon::SignalLoop() {
  sigset_t set = HandledSignals();
  const timespec tick{.tv_sec = 0, .tv_nsec = 200'000'000};
  while (!shut_down_.load()) {
    int sig = ::sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGUSR1) {
      if (Status s = WriteStatsFile(); !s.ok()) GLOG_WARN("stats file: {}", s.ToString());
    } else if (sig == SIGUSR2) {
      if (options_.holder && !is_worker()) {
        GLOG_INFO("signal {}: handing the mount over", sig);
        handover_.store(true);
        RequestStop();
      } else {
        GLOG_WARN("signal {} ignored: no mount holder to hand the mount to", sig);
      }
    } else if (sig == SIGHUP) {
      ReloadPeers();
    } else if (sig == SIGTERM || sig == SIGINT) {
      GLOG_INFO("signal {}: stopping", sig);
      RequestStop();
    }
  }
}

void Daemon::ReloadPeers() {
  ClusterNode* cluster = dataset_ ? dataset_->cluster() : nullptr;
  if (cluster == nullptr || options_.dataset.cluster.peers_file.empty()) {
    GLOG_WARN("SIGHUP ignored: no --cluster-peers-file to read again");
    return;
  }
  auto changed = cluster->ReloadPeersFile();
  if (!changed.ok()) {
    GLOG_ERROR("SIGHUP: member list not changed: {}", changed.status().ToString());
  } else if (!*changed) {
    GLOG_INFO("SIGHUP: {} lists the same members", options_.dataset.cluster.peers_file);
  }
}

Status Daemon::RequestDrain() {
  ClusterNode* cluster = dataset_ ? dataset_->cluster() : nullptr;
  if (cluster == nullptr) return Unimplemented("this daemon is not part of a cluster");
  if (drain_requested_.load()) return Status::Ok();
  const ClusterOptions& co = options_.dataset.cluster;
  // A static member still listed by the others would wait for nothing:
  // they keep it as an owner until their lists drop it.
  if (co.etcd.empty() && !co.client_only && !cluster->RemovedByOthers()) {
    return InvalidArgument(
        "every other member still lists this node: take it out of their member lists first "
        "(--cluster-peers-file and SIGHUP, or Fluid's worker.replicas), then drain");
  }
  if (drain_requested_.exchange(true)) return Status::Ok();
  GLOG_INFO("drain requested: leaving the cluster, then stopping");
  RequestStop();
  return Status::Ok();
}

void Daemon::RequestStop() {
  MutexLock lock(stop_mu_);
  stop_requested_ = true;
  stop_cv_.NotifyAll();
}

void Daemon::AddStopHook(std::function<void()> hook) {
  MutexLock lock(stop_mu_);
  stop_hooks_.push_back(std::move(hook));
}

Status Daemon::Run() {
  {
    MutexLock lock(stop_mu_);
    stop_cv_.Wait(lock, [this]() REQUIRES(stop_mu_) { return stop_requested_; });
  }
  return Shutdown();
}

Status Daemon::Shutdown() {
  if (shut_down_.exchange(true)) return Status::Ok();
  // A cluster member leaving (not a mount handed over) first lets the others
  // take over its share, still serving reads and peers meanwhile. A member
  // of a static list leaves only when the others' lists no longer name it
  // (otherwise it is a restart, and its share comes back with it); a drain
  // asked for (`granary worker --drain`) was checked when asked.
  ClusterNode* cluster = dataset_ && !handover_.load() ? dataset_->cluster() : nullptr;
  const ClusterOptions& co = options_.dataset.cluster;
  if (cluster && co.drain_timeout.count() > 0 && !co.client_only &&
      (drain_requested_.load() || !co.etcd.empty() || cluster->RemovedByOthers())) {
    if (Status s = cluster->Drain(co.drain_timeout); !s.ok())
      GLOG_WARN("cluster: {}", s.ToString());
  }
  std::vector<std::function<void()>> hooks;
  {
    MutexLock lock(stop_mu_);
    hooks.swap(stop_hooks_);
  }
  for (auto& hook : hooks) hook();
  const bool handover = handover_.load() && fuse_ != nullptr;
  if (handover) {
    // The successor takes the connection: answer what is being served (the
    // origin's answers included), stop reading, leave the mount in place.
    services_.reset();
    detaching_.store(true);
    if (!fuse_->Detach(kHandoverDrain)) {
      GLOG_WARN("handover: requests still served after {} s; the successor gets them again",
                kHandoverDrain.count());
      std::fflush(nullptr);
      std::_Exit(kExitHandedOver);
    }
    GLOG_INFO("handover: every request answered; the mount is left to the successor");
  }
  // Readers and loads waiting on the origin leave now (a stalled origin
  // must not hold the unmount).
  if (dataset_) dataset_->engine().CancelWaits();
  services_.reset();  // cancels a running load; before the engine goes
  if (fuse_ && !handover) fuse_->Stop();
  if (unmount_watcher_.joinable()) unmount_watcher_.join();
  if (signal_thread_.joinable()) signal_thread_.join();
  DaemonStats last = stats();
  // The dataset first: its engine waits for queued admissions and readahead,
  // whose fetched-bytes hook (PushFetched) uses fs_ and fuse_.
  Status result;
  if (dataset_) {
    // Every reader has left (the engine's waits end at shutdown) and Close()
    // aborts the origin's transfers; a daemon process does not wait for a
    // transfer that still does not end longer than kShutdownGrace.
    Mutex closed_mu;
    CondVar closed_cv;
    bool closed = false;
    std::thread watchdog;
    if (options_.handle_signals) {
      watchdog = std::thread([&] {
        MutexLock lock(closed_mu);
        if (closed_cv.WaitFor(lock, kShutdownGrace, [&] { return closed; })) return;
        GLOG_WARN(
            "origin transfers still running {} s after unmount (stalled origin?); "
            "exiting without waiting for them",
            std::chrono::duration_cast<std::chrono::seconds>(kShutdownGrace).count());
        if (serving_ && !options_.holder) ::unlink(pid_path().c_str());
        std::fflush(nullptr);
        std::_Exit(handover ? kExitHandedOver : 0);
      });
    }
    result = dataset_->Close();
    {
      MutexLock lock(closed_mu);
      closed = true;
    }
    closed_cv.NotifyAll();
    if (watchdog.joinable()) watchdog.join();
    last.store = dataset_->store().stats();
  }
  if (recover_thread_.joinable()) recover_thread_.join();  // the origin is aborted: ends soon
  fs_.reset();
  overlay_.reset();
  {
    MutexLock lock(final_mu_);
    final_stats_ = last;
    has_final_ = true;
  }
  if (serving_) {
    if (Status s = WriteStatsFile(); !s.ok()) GLOG_WARN("stats file: {}", s.ToString());
    if (!options_.holder) ::unlink(pid_path().c_str());
    GLOG_INFO("{} {}", is_worker() ? "stopped" : handover ? "handed over" : "unmounted", run_name_);
  }
  return result;
}

Daemon::~Daemon() { Shutdown().IgnoreError(); }

DaemonStats Daemon::stats() const {
  {
    MutexLock lock(final_mu_);
    if (has_final_) return final_stats_;
  }
  DaemonStats out;
  if (fuse_) {
    out.fuse = fuse_->stats();
    out.session = fuse_->session();
  }
  if (dataset_) {
    out.engine = dataset_->engine().stats();
    out.store = dataset_->store().stats();
    out.ufs = dataset_->ufs().stats();
    if (ClusterNode* cluster = dataset_->cluster()) out.cluster = cluster->stats();
  }
  return out;
}

std::string Daemon::StatsJson() const {
  DaemonStats s = stats();
  nlohmann::json j;
  j["source"] = source();
  j["mountpoint"] = options_.mountpoint;
  j["dataset_id"] = dataset_ ? dataset_->id() : std::string();
  j["pid"] = ::getpid();
  j["fuse"] = ToJson(s.fuse);
  // The session beside the counters (not part of FuseStats).
  j["fuse"]["read_mode"] = FuseReadModeName(options_.fuse.read_mode);
  j["fuse"]["transport"] = FuseTransportName(s.session.transport);
  j["fuse"]["passthrough"] = s.session.passthrough;
  j["fuse"]["passthrough_note"] = s.session.passthrough_note;
  j["fuse"]["threads"] = s.session.threads;
  j["engine"] = ToJson(s.engine);
  j["store"] = ToJson(s.store);
  j["ufs"] = {{"list_requests", s.ufs.list_requests},
              {"stat_requests", s.ufs.stat_requests},
              {"read_requests", s.ufs.read_requests},
              {"read_bytes", s.ufs.read_bytes},
              {"errors", s.ufs.errors},
              {"bad_list_entries", s.ufs.bad_list_entries}};
  if (s.cluster) j["cluster"] = ToJson(*s.cluster);
  return j.dump(2) + "\n";
}

Status Daemon::WriteStatsFile() const { return ReplaceFileContents(stats_path(), StatsJson()); }

std::string Daemon::stats_path() const {
  return RunFilePath(options_.run_dir, run_name_, "stats.json");
}

std::string Daemon::pid_path() const { return RunFilePath(options_.run_dir, run_name_, "pid"); }

}  // namespace granary
