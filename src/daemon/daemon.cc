// Daemon: start-up checks, wiring, signal handling and clean shutdown (see daemon.h).
#include "daemon/daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/uri.h"
#include "daemon/control_service.h"
#include "daemon/engine_fs.h"

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
  return set;
}

// The mount point exists, is a directory, is not a mount yet, and is empty.
Status CheckMountpoint(const std::string& mp, bool allow_non_empty) {
  struct stat st {};
  if (::stat(mp.c_str(), &st) != 0) {
    if (errno == ENOTCONN) return InvalidArgument("mount point " + mp + " is already mounted (dead mount: run 'granary umount " + mp + "')");
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

// Creates `dir` (and parents) and proves it is writable.
Status PrepareWritableDir(const std::string& dir, std::string_view what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return PermissionDenied(std::string(what) + " " + dir + " cannot be created: " + ec.message());
  std::string probe = dir + "/.granary-write-test";
  int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return PermissionDenied(std::string(what) + " " + dir + " is not writable: " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

// min(fallback, 90% of the free space of the filesystem holding `dir`).
uint64_t AutoQuota(const std::string& dir, uint64_t fallback) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return fallback;
  uint64_t free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return std::min(fallback, free / 10 * 9);
}

// A List of the dataset prefix: fails early on a missing bucket or refused
// credentials. An empty listing under a non-empty prefix is an error too
// (almost always a typo).
Status ProbeSource(UnderStorage& ufs, const Uri& uri) {
  std::string prefix = uri.key;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  ASSIGN_OR_RETURN(ListPage page, ufs.List(ListRequest{.prefix = prefix, .max_keys = 1}));
  if (page.objects.empty() && page.common_prefixes.empty() && !uri.key.empty()) {
    return NotFound("no objects under " + uri.ToString());
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) return IoError("cannot write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp, errno);
  return Status::Ok();
}

}  // namespace

Status DaemonOptions::Validate() const {
  if (source.empty()) return InvalidArgument("source: required");
  if (mountpoint.empty()) return InvalidArgument("mountpoint: required");
  if (cache_dirs.empty()) return InvalidArgument("cache_dirs: at least one cache directory is required");
  for (const TierLevel& t : cache_dirs) {
    if (t.path.empty()) return InvalidArgument("cache_dirs: empty path");
  }
  if (default_cache_size == 0) return InvalidArgument("default_cache_size: must be > 0");
  if (policy != "lru" && policy != "training") {
    return InvalidArgument("policy: '" + policy + "' is not lru or training");
  }
  if (run_dir.empty()) return InvalidArgument("run_dir: required");
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

// Tier directories, snapshot and store (see the cache layout in daemon.h).
Status Daemon::OpenCache(const Uri& uri) {
  const DaemonOptions& o = options_;
  std::vector<TierLevel> tiers;
  if (o.mem_cache > 0) {
    std::string dir = "/dev/shm/granary-" + dataset_id_;
    RETURN_IF_ERROR(PrepareWritableDir(dir, "memory cache dir"));
    tiers.push_back(TierLevel{.medium = Medium::kMem, .path = dir, .quota = o.mem_cache});
  }
  for (const TierLevel& t : o.cache_dirs) {
    TierLevel tier = t;
    tier.path = (fs::path(t.path) / dataset_id_).string();
    RETURN_IF_ERROR(PrepareWritableDir(tier.path, "cache dir"));
    if (tier.quota == 0) tier.quota = AutoQuota(tier.path, o.default_cache_size);
    tiers.push_back(tier);
  }
  dataset_dir_ = (fs::path(o.cache_dirs.front().path) / dataset_id_).string();

  SnapshotOptions snap_opts{.source_uri = o.source, .prefix = uri.key};
  ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> snap,
                   Snapshot::LoadOrBuild(*ufs_, snap_opts, dataset_dir_ + "/snapshot"));
  snapshot_ = std::move(snap);
  GLOG_INFO("snapshot v{} of {}: {} files, {} bytes", snapshot_->version(), o.source,
            snapshot_->file_count(), snapshot_->total_bytes());

  if (o.read_mode_auto) ResolveAutoReadMode();

  StoreOptions store_opts{.tiers = tiers,
                          .policy = o.policy,
                          .block_size = o.block_size,
                          .index_dir = dataset_dir_ + "/index",
                          // cached read mode: the mount's page cache keeps the copy
                          .drop_read_pages = o.fuse.read_mode == FuseReadMode::kCached};
  ASSIGN_OR_RETURN(store_, Store::Open(store_opts));
  return Status::Ok();
}

void Daemon::ResolveAutoReadMode() {
  DaemonOptions& o = options_;
  uint64_t limit = o.auto_cached_max_bytes;
  if (limit == 0) {
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page = ::sysconf(_SC_PAGE_SIZE);
    limit = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page / 2 : 0;
  }
  const uint64_t total = snapshot_->total_bytes();
  const bool cached = o.fuse.passthrough != FusePassthrough::kOn && total <= limit;
  o.fuse.read_mode = cached ? FuseReadMode::kCached : FuseReadMode::kPassthrough;
  GLOG_INFO("read mode auto: {} ({} bytes of data, {} than {} bytes{})",
            FuseReadModeName(o.fuse.read_mode), total, total <= limit ? "not more" : "more",
            limit, o.fuse.passthrough == FusePassthrough::kOn ? "; --passthrough on" : "");
}

Status Daemon::Open() {
  DaemonOptions& o = options_;
  o.mountpoint = CanonicalMountpoint(o.mountpoint);
  ASSIGN_OR_RETURN(Uri uri, ParseUri(o.source));
  o.source = uri.ToString();
  dataset_id_ = DatasetId(o.source);
  RETURN_IF_ERROR(CheckMountpoint(o.mountpoint, o.fuse.allow_non_empty));
  if (auto pid = ReadPidFile(o.run_dir, o.mountpoint); pid.ok() && ::kill(pid->pid, 0) == 0) {
    return InvalidArgument("mount point " + o.mountpoint + " is already served by granary (pid " +
                           std::to_string(pid->pid) + ")");
  }
  RETURN_IF_ERROR(PrepareWritableDir(o.run_dir, "run directory"));

  ASSIGN_OR_RETURN(std::unique_ptr<UnderStorage> ufs, OpenUnderStorage(uri, o.ufs));
  ufs_ = std::move(ufs);
  RETURN_IF_ERROR(ProbeSource(*ufs_, uri));

  RETURN_IF_ERROR(OpenCache(uri));

  EngineOptions engine_opts = o.engine;
  engine_opts.dataset = dataset_id_;
  RETURN_IF_ERROR(engine_opts.Validate());
  engine_ = std::make_unique<CacheEngine>(ufs_, snapshot_, store_.get(), engine_opts);
  const bool offer = o.fuse.read_mode == FuseReadMode::kPassthrough &&
                     o.fuse.passthrough != FusePassthrough::kOff;
  fs_ = std::make_unique<EngineFs>(engine_.get(), EngineFsOptions{.offer_backing = offer});
  if (o.fuse.read_mode == FuseReadMode::kCached && o.push_fetched) {
    // The mount keeps file pages across opens: bytes fetched ahead of their
    // reader (warm-up, readahead) go straight into its page cache, so that
    // reader needs no READ, and the cache file needs no page-cache copy.
    engine_->SetFetchedHook(
        [this](const Snapshot& snap, uint64_t ino, uint64_t offset, std::string_view bytes) {
          return PushFetched(snap, ino, offset, bytes);
        });
  }

  FuseOptions fuse_opts = o.fuse;
  fuse_opts.mountpoint = o.mountpoint;
  fuse_opts.fsname = "granary";
  fuse_ = std::make_unique<FuseServer>(fs_.get(), fuse_opts);
  RETURN_IF_ERROR(fuse_->Start());

  std::string pid_text = std::to_string(::getpid()) + "\n" + o.mountpoint + "\n" + o.source + "\n";
  RETURN_IF_ERROR(WriteFileAtomically(pid_path(), pid_text));
  ASSIGN_OR_RETURN(services_, StartServices(engine_.get(),
                                            ServicesOptions{.run_dir = o.run_dir,
                                                            .mountpoint = o.mountpoint,
                                                            .read_mode = std::string(
                                                                FuseReadModeName(o.fuse.read_mode)),
                                                            .metrics_addr = o.metrics_addr,
                                                            .load_on_start = o.load_on_start,
                                                            .load_threads = o.load_threads},
                                            [this] { return fuse_->stats(); },
                                            [this]() -> Result<nlohmann::json> {
                                              ASSIGN_OR_RETURN(SyncResult r, Sync());
                                              return SyncResultToJson(r);
                                            }));
  unmount_watcher_ = std::thread([this] {
    fuse_->Wait();
    RequestStop();
  });
  if (o.handle_signals) signal_thread_ = std::thread([this] { SignalLoop(); });
  serving_ = true;
  GLOG_INFO("mounted {} on {} (dataset {}, transport {}, passthrough {})", o.source, o.mountpoint,
            dataset_id_, FuseTransportName(fuse_->session().transport),
            fuse_->session().passthrough ? "on" : "off");
  return Status::Ok();
}

bool Daemon::PushFetched(const Snapshot& snap, uint64_t ino, uint64_t offset,
                         std::string_view bytes) {
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
  if (&snap != engine_->snapshot().get()) return false;  // the root shows the current version
  std::string path = snap.Path(ino);
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash);
  const std::string listed_key = std::to_string(snap.version()) + ":" + dir;
  bool lister = false;
  {
    std::unique_lock lock(push_mu_);
    lister = push_listed_.try_emplace(listed_key, false).second;
    if (!lister) push_cv_.wait(lock, [&] { return push_listed_[listed_key]; });
  }
  if (lister) {
    fuse_->ListDir(dir);
    {
      std::lock_guard lock(push_mu_);
      push_listed_[listed_key] = true;
    }
    push_cv_.notify_all();
  }
  stored = fuse_->StoreData(node, offset, bytes);
  return stored.ok() && *stored;
}

Result<SyncResult> Daemon::Sync() {
  std::lock_guard lock(sync_mu_);
  const auto t0 = std::chrono::steady_clock::now();
  const std::shared_ptr<const Snapshot> old = engine_->snapshot();
  ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> built,
                   Snapshot::Rebuild(*ufs_, *old, dataset_dir_ + "/snapshot"));
  const std::shared_ptr<const Snapshot> next = std::move(built);
  SyncResult r{.old_version = old->version(),
               .new_version = next->version(),
               .files = next->file_count(),
               .bytes = next->total_bytes()};
  std::vector<ObjectKey> stale;  // cache keys of removed or changed objects
  old->ForEachFile([&](const EntryView& e) {
    std::optional<uint64_t> ino = next->FindPath(old->Path(e.ino));
    std::optional<EntryView> now = ino ? next->Get(*ino) : std::nullopt;
    if (!now || now->is_dir) {
      ++r.removed;
    } else if (now->etag != e.etag || now->size != e.size) {
      ++r.changed;
    } else {
      ++r.unchanged;
      return;
    }
    stale.push_back(engine_->KeyOf(*old, e));
  });
  r.added = r.files - r.changed - r.unchanged;
  // Switch first: from here on new lookups and loads use the new version.
  engine_->SetSnapshot(next);
  snapshot_ = next;
  std::vector<std::string> names = fs_->AddVersion(next);
  for (const std::string& name : names) {
    if (Status s = fuse_->InvalidateEntry(kRootIno, name); !s.ok()) {
      GLOG_WARN("sync: {}", s.ToString());
    } else {
      ++r.invalidated_names;
    }
  }
  if (Status s = fuse_->InvalidateNode(kRootIno); !s.ok()) GLOG_WARN("sync: {}", s.ToString());
  for (const ObjectKey& key : stale) {
    if (!store_->Contains(key)) continue;
    if (Status s = store_->Remove(key); !s.ok()) {
      GLOG_WARN("sync: dropping the cache file of {}: {}", key.key, s.ToString());
      continue;
    }
    ++r.cache_files_dropped;
    r.cache_bytes_dropped += key.size;
  }
  r.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GLOG_INFO("sync: snapshot v{} -> v{}: {} files ({} added, {} removed, {} changed), {} cache "
            "files dropped, {:.2f} s",
            r.old_version, r.new_version, r.files, r.added, r.removed, r.changed,
            r.cache_files_dropped, r.elapsed_s);
  return r;
}

nlohmann::json SyncResultToJson(const SyncResult& r) {
  return {{"old_version", r.old_version},
          {"new_version", r.new_version},
          {"files", r.files},
          {"bytes", r.bytes},
          {"added", r.added},
          {"removed", r.removed},
          {"changed", r.changed},
          {"unchanged", r.unchanged},
          {"cache_files_dropped", r.cache_files_dropped},
          {"cache_bytes_dropped", r.cache_bytes_dropped},
          {"invalidated_names", r.invalidated_names},
          {"elapsed_s", r.elapsed_s}};
}

void Daemon::SignalLoop() {
  sigset_t set = HandledSignals();
  const timespec tick{.tv_sec = 0, .tv_nsec = 200'000'000};
  while (!shut_down_.load()) {
    int sig = ::sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGUSR1) {
      if (Status s = WriteStatsFile(); !s.ok()) GLOG_WARN("stats file: {}", s.ToString());
    } else if (sig == SIGTERM || sig == SIGINT) {
      GLOG_INFO("signal {}: stopping", sig);
      RequestStop();
    }
  }
}

void Daemon::RequestStop() {
  std::lock_guard lock(stop_mu_);
  stop_requested_ = true;
  stop_cv_.notify_all();
}

void Daemon::AddStopHook(std::function<void()> hook) {
  std::lock_guard lock(stop_mu_);
  stop_hooks_.push_back(std::move(hook));
}

Status Daemon::Run() {
  {
    std::unique_lock lock(stop_mu_);
    stop_cv_.wait(lock, [this] { return stop_requested_; });
  }
  return Shutdown();
}

Status Daemon::Shutdown() {
  if (shut_down_.exchange(true)) return Status::Ok();
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(stop_mu_);
    hooks.swap(stop_hooks_);
  }
  for (auto& hook : hooks) hook();
  services_.reset();  // cancels a running load; before the engine goes
  if (fuse_) fuse_->Stop();
  if (unmount_watcher_.joinable()) unmount_watcher_.join();
  if (signal_thread_.joinable()) signal_thread_.join();
  DaemonStats last = stats();
  // The engine first: it waits for queued admissions and readahead, whose
  // fetched-bytes hook (PushFetched) uses fs_ and fuse_.
  engine_.reset();
  fs_.reset();
  Status result;
  if (store_) {
    result = store_->Checkpoint();
    last.store = store_->stats();
  }
  {
    std::lock_guard lock(final_mu_);
    final_stats_ = last;
    has_final_ = true;
  }
  if (serving_) {
    if (Status s = WriteStatsFile(); !s.ok()) GLOG_WARN("stats file: {}", s.ToString());
    ::unlink(pid_path().c_str());
    GLOG_INFO("unmounted {}", options_.mountpoint);
  }
  return result;
}

Daemon::~Daemon() { Shutdown().IgnoreError(); }

DaemonStats Daemon::stats() const {
  {
    std::lock_guard lock(final_mu_);
    if (has_final_) return final_stats_;
  }
  DaemonStats out;
  if (fuse_) {
    out.fuse = fuse_->stats();
    out.session = fuse_->session();
  }
  if (engine_) out.engine = engine_->stats();
  if (store_) out.store = store_->stats();
  if (ufs_) out.ufs = ufs_->stats();
  return out;
}

std::string Daemon::StatsJson() const {
  DaemonStats s = stats();
  nlohmann::json j;
  j["source"] = options_.source;
  j["mountpoint"] = options_.mountpoint;
  j["dataset_id"] = dataset_id_;
  j["pid"] = ::getpid();
  j["fuse"] = {{"requests", s.fuse.requests},
               {"errors", s.fuse.errors},
               {"passthrough_opens", s.fuse.passthrough_opens},
               {"userspace_opens", s.fuse.userspace_opens},
               {"userspace_reads", s.fuse.userspace_reads},
               {"userspace_read_bytes", s.fuse.userspace_read_bytes},
               {"backing_ids_open", s.fuse.backing_ids_open},
               {"backing_open_failures", s.fuse.backing_open_failures},
               {"uring_requests", s.fuse.uring_requests},
               {"dirs_prefetched", s.fuse.dirs_prefetched},
               {"stores", s.fuse.stores},
               {"store_bytes", s.fuse.store_bytes},
               {"read_mode", FuseReadModeName(options_.fuse.read_mode)},
               {"transport", FuseTransportName(s.session.transport)},
               {"passthrough", s.session.passthrough},
               {"passthrough_note", s.session.passthrough_note},
               {"threads", s.session.threads}};
  const EngineStats& e = s.engine;
  j["engine"] = {{"files", e.ufs_files},           {"bytes", e.ufs_bytes},
                 {"reads", e.reads},               {"hit_reads", e.hit_reads},
                 {"miss_reads", e.miss_reads},     {"hit_bytes", e.hit_bytes},
                 {"miss_bytes", e.miss_bytes},     {"read_errors", e.read_errors},
                 {"origin_requests", e.origin_requests}, {"origin_bytes", e.origin_bytes},
                 {"origin_errors", e.origin_errors}, {"admitted", e.admitted},
                 {"not_admitted", e.not_admitted}};
  nlohmann::json tiers = nlohmann::json::array();
  for (const TierStats& t : s.store.tiers) {
    tiers.push_back({{"medium", MediumName(t.medium)}, {"path", t.path}, {"quota", t.quota},
                     {"used_bytes", t.used_bytes}, {"files", t.files}});
  }
  j["store"] = {{"tiers", tiers},
                {"read_hits", s.store.read_hits},
                {"read_misses", s.store.read_misses},
                {"evictions", s.store.evictions},
                {"checksum_failures", s.store.checksum_failures},
                {"recovered_objects", s.store.recovered_objects}};
  j["ufs"] = {{"list_requests", s.ufs.list_requests}, {"stat_requests", s.ufs.stat_requests},
              {"read_requests", s.ufs.read_requests}, {"read_bytes", s.ufs.read_bytes},
              {"errors", s.ufs.errors}};
  return j.dump(2) + "\n";
}

Status Daemon::WriteStatsFile() const { return WriteFileAtomically(stats_path(), StatsJson()); }

std::string Daemon::stats_path() const {
  return RunFilePath(options_.run_dir, options_.mountpoint, "stats.json");
}

std::string Daemon::pid_path() const {
  return RunFilePath(options_.run_dir, options_.mountpoint, "pid");
}

}  // namespace granary
