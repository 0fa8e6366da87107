// Dataset: wiring of ufs, snapshot, store, engine and cluster (see dataset.h).
#include "dataset/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cluster/cluster_node.h"
#include "common/clock.h"
#include "common/file_modes.h"
#include "common/log.h"
#include "common/uri.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

// Bytes the files and directories under `dir` occupy on disk (st_blocks, so
// sparse files count what they hold). Unreadable entries count 0.
uint64_t DiskUsage(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  const auto options = fs::directory_options::skip_permission_denied;
  for (fs::recursive_directory_iterator it(dir, options, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (::lstat(it->path().c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

// min(fallback, 90% of what the cache in `dir` may occupy: the free space of
// its filesystem plus what `dir` already holds). Counting the cache's own
// files keeps the quota of a cache that filled its disk at the next open, so
// a remount with unchanged flags evicts nothing.
uint64_t AutoQuota(const std::string& dir, uint64_t fallback) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return fallback;
  const uint64_t available = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize + DiskUsage(dir);
  return std::min(fallback, available / 10 * 9);
}

// Whether one block can be written under `dir` (a file created, written,
// removed). False on ENOSPC/EDQUOT: the disk or the user's quota is full.
bool HasRoom(const std::string& dir) {
  const std::string probe = dir + "/.granary-space-test";
  int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return !(errno == ENOSPC || errno == EDQUOT);
  const std::string block(4096, '\0');
  bool room = ::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size()) ||
              !(errno == ENOSPC || errno == EDQUOT);
  ::close(fd);
  ::unlink(probe.c_str());
  return room;
}

// The quota of an auto-sized tier whose disk is full at open: sized against
// the filesystem as a whole, min(fallback, 90% of its size). Until space
// frees up every admission fails with ENOSPC (counted as store no_space, the
// read served from the origin); afterwards the store's disk-full handling
// evicts to make room whenever the disk fills again.
uint64_t FullDiskQuota(const std::string& dir, uint64_t fallback) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return fallback;
  return std::min(fallback, static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize / 10 * 9);
}

// The snapshot of a dataset whose cache dir is full: built in a private
// directory under /dev/shm and unlinked at once, so it lives in memory for as
// long as it is mapped. Sync writes the next version to the cache dir again.
Result<std::unique_ptr<Snapshot>> BuildSnapshotInMemory(UnderStorage& ufs,
                                                        const SnapshotOptions& options) {
  std::string tmpl = "/dev/shm/granary-snapshot-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("mkdtemp " + tmpl, errno);
  const std::string file = tmpl + "/snapshot";
  auto snap = Snapshot::Build(ufs, options, file, 1);
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  return snap;
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

// A dataset's own cache directory (a tier dir: <cache dir>/<id> or the memory
// tier's /dev/shm/granary-<id>): writable and private to this user, also when
// an older version left it world-readable. Its parents are the user's.
//
// The directory itself must be a real directory (not a symlink) owned by this
// user: a predictable path such as /dev/shm/granary-<id> can be created first
// by another local user, who could then read the cache or plant links in it
//. Such a directory is refused, naming its owner; it is never
// chmod'ed through a link. Once it is ours and 0700 nobody else can add
// entries, and the store opens cache files with O_NOFOLLOW.
Status PrepareCacheDir(const std::string& dir, std::string_view what) {
  std::error_code ec;
  fs::create_directories(fs::path(dir).parent_path(), ec);
  if (::mkdir(dir.c_str(), kCacheDirMode) != 0 && errno != EEXIST) {
    return PermissionDenied(std::string(what) + " " + dir +
                            " cannot be created: " + std::strerror(errno));
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    struct stat lst {};
    if (::lstat(dir.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      return PermissionDenied(std::string(what) + " " + dir +
                              " is a symbolic link: refusing it (remove it; Granary creates "
                              "the directory itself)");
    }
    return PermissionDenied(std::string(what) + " " + dir +
                            " cannot be opened: " + std::strerror(err));
  }
  struct stat st {};
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = PermissionDenied(std::string(what) + " " + dir +
                              " cannot be stat'ed: " + std::strerror(errno));
  } else if (st.st_uid != ::geteuid()) {
    status = PermissionDenied(std::string(what) + " " + dir + " belongs to uid " +
                              std::to_string(st.st_uid) + ", not to this user (uid " +
                              std::to_string(::geteuid()) +
                              "): refusing it, another user could read or redirect the cache "
                              "(remove it; Granary creates the directory itself)");
  } else if ((st.st_mode & 07777) != kCacheDirMode && ::fchmod(fd, kCacheDirMode) != 0) {
    status = PermissionDenied(std::string(what) + " " + dir +
                              " cannot be made private: " + std::strerror(errno));
  }
  ::close(fd);
  RETURN_IF_ERROR(status);
  return PrepareWritableDir(dir, what);
}

// The snapshot file at `path`, if there is one, private to this user (the
// store does the same for its own files).
void MakeSnapshotPrivate(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & 07777) == kCacheFileMode) return;
  if (::chmod(path.c_str(), kCacheFileMode) != 0) {
    GLOG_WARN("cannot make {} private: {}", path, std::strerror(errno));
  }
}

}  // namespace

std::string DatasetId(std::string_view source) {
  auto uri = ParseUri(source);
  const std::string canonical = uri.ok() ? uri->ToString() : std::string(source);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(canonical.data(), canonical.size())));
  return std::string(buf, 12);
}

Status PrepareWritableDir(const std::string& dir, std::string_view what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return PermissionDenied(std::string(what) + " " + dir + " cannot be created: " + ec.message());
  std::string probe = dir + "/.granary-write-test";
  int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return PermissionDenied(std::string(what) + " " + dir +
                            " is not writable: " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

Status DatasetOptions::Validate() const {
  if (source.empty()) return InvalidArgument("source: required");
  if (cache_dirs.empty())
    return InvalidArgument("cache_dirs: at least one cache directory is required");
  for (const TierLevel& t : cache_dirs) {
    if (t.path.empty()) return InvalidArgument("cache_dirs: empty path");
  }
  if (default_cache_size == 0) return InvalidArgument("default_cache_size: must be > 0");
  if (policy != "lru" && policy != "training") {
    return InvalidArgument("policy: '" + policy + "' is not lru or training");
  }
  return cluster.Validate();
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

Dataset::Dataset(DatasetOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<Dataset>> Dataset::Open(DatasetOptions options,
                                               std::shared_ptr<UnderStorage> ufs) {
  options.origin = std::move(ufs);
  return Open(std::move(options));
}

Result<std::unique_ptr<Dataset>> Dataset::Open(DatasetOptions options) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<Dataset> d(new Dataset(std::move(options)));
  if (Status s = d->OpenAll(); !s.ok()) {
    d->Close().IgnoreError();
    return s;
  }
  return d;
}

Status Dataset::OpenAll() {
  std::shared_ptr<UnderStorage> ufs = options_.origin;
  Uri uri;
  if (auto parsed = ParseUri(options_.source); parsed.ok()) {
    uri = std::move(*parsed);
    options_.source = uri.ToString();
  } else if (!ufs) {
    return parsed.status();
  }  // else: a name for a caller-made origin, listed from its root (uri.key "")
  id_ = DatasetId(options_.source);
  if (ufs) {
    ufs_ = std::move(ufs);
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<UnderStorage> opened, OpenUnderStorage(uri, options_.ufs));
    ufs_ = std::move(opened);
    owns_ufs_ = true;
  }
  if (options_.probe_source) RETURN_IF_ERROR(ProbeSource(*ufs_, uri));
  RETURN_IF_ERROR(OpenCache(uri.key));

  EngineOptions engine_opts = options_.engine;
  engine_opts.dataset = id_;
  RETURN_IF_ERROR(engine_opts.Validate());
  engine_ = std::make_unique<CacheEngine>(ufs_, opened_snapshot_, store_.get(), engine_opts);
  opened_snapshot_.reset();
  if (options_.cluster.enabled()) {
    ASSIGN_OR_RETURN(
        cluster_, ClusterNode::Start(options_.cluster,
                                     ClusterDataset{
                                         .engine = engine_.get(),
                                         .store = store_.get(),
                                         .id = id_,
                                         .dir = dir_,
                                         .origin_concurrency = options_.engine.origin_concurrency,
                                     }));
  }
  return Status::Ok();
}

// Tier directories, snapshot and store (see the cache layout in dataset.h).
Status Dataset::OpenCache(const std::string& prefix) {
  const DatasetOptions& o = options_;
  std::vector<TierLevel> tiers;
  if (o.mem_cache > 0) {
    std::string dir = "/dev/shm/granary-" + id_;
    RETURN_IF_ERROR(PrepareCacheDir(dir, "memory cache dir"));
    tiers.push_back(TierLevel{.medium = Medium::kMem, .path = dir, .quota = o.mem_cache});
  }
  for (const TierLevel& t : o.cache_dirs) {
    TierLevel tier = t;
    tier.path = (fs::path(t.path) / id_).string();
    RETURN_IF_ERROR(PrepareCacheDir(tier.path, "cache dir"));
    // A full disk does not refuse the dataset: reads go to the
    // origin, admissions fail (counted) until space frees up.
    const bool full = !HasRoom(tier.path);
    if (full) {
      GLOG_WARN(
          "cache dir {} is full: serving from the origin without caching until space frees up",
          tier.path);
    }
    if (tier.quota == 0) {
      tier.quota = AutoQuota(tier.path, o.default_cache_size);
      if (full && tier.quota < o.block_size) {
        tier.quota = FullDiskQuota(tier.path, o.default_cache_size);
      }
    }
    tiers.push_back(tier);
  }
  dir_ = (fs::path(o.cache_dirs.front().path) / id_).string();

  MakeSnapshotPrivate(dir_ + "/snapshot");
  SnapshotOptions snap_opts{.source_uri = o.source, .prefix = prefix};
  Result<std::unique_ptr<Snapshot>> snap =
      Snapshot::LoadOrBuild(*ufs_, snap_opts, dir_ + "/snapshot");
  if (!snap.ok() && snap.status().code() == Code::kNoSpace) {
    GLOG_WARN("cache dir {} is full: the snapshot is kept in memory ({})", dir_,
              snap.status().ToString());
    snap = BuildSnapshotInMemory(*ufs_, snap_opts);
  }
  if (!snap.ok()) return snap.status();
  opened_snapshot_ = std::move(*snap);
  GLOG_INFO("snapshot v{} of {}: {} files, {} bytes", opened_snapshot_->version(), o.source,
            opened_snapshot_->file_count(), opened_snapshot_->total_bytes());

  StoreOptions store_opts{
      .tiers = tiers,
      .policy = o.policy,
      .block_size = o.block_size,
      .index_dir = dir_ + "/index",
      .background = o.store_background,
      .drop_read_pages = o.drop_read_pages ? o.drop_read_pages(*opened_snapshot_) : false};
  ASSIGN_OR_RETURN(store_, Store::Open(store_opts));
  return Status::Ok();
}

Status Dataset::Close() {
  if (closed_) return Status::Ok();
  closed_ = true;
  // The cluster first: peers stop calling into the engine. The node itself
  // lives until the engine's readahead (which may still ask it, and gets
  // NotFound) is done with it.
  if (cluster_) cluster_->Stop();
  // The store's ownership oracles call into the cluster node and the engine:
  // removed before either goes (an eviction pass may be running).
  if (store_) store_->SetOwnershipOracle(nullptr, nullptr);
  // Transfers stuck on a stalled origin end now (kCancelled) instead of after
  // their timeouts, so the engine's wait for its fetches below is short.
  if (owns_ufs_ && ufs_) ufs_->Abort();
  engine_.reset();  // waits for queued admissions and readahead
  cluster_.reset();
  Status result;
  if (store_) result = store_->Checkpoint();
  return result;
}

Dataset::~Dataset() {
  if (Status s = Close(); !s.ok()) GLOG_WARN("dataset {}: closing: {}", id_, s.ToString());
}

Result<SyncResult> Dataset::Sync(const SwitchedHook& switched) {
  MutexLock lock(sync_mu_);
  const auto t0 = Clock::Real()->Now();
  const std::shared_ptr<const Snapshot> old = engine_->snapshot();
  ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> built,
                   Snapshot::Rebuild(*ufs_, *old, dir_ + "/snapshot"));
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
  if (switched) switched(next, r);
  for (const ObjectKey& key : stale) {
    if (!store_->Contains(key)) continue;
    if (Status s = store_->Remove(key); !s.ok()) {
      GLOG_WARN("sync: dropping the cache file of {}: {}", key.key, s.ToString());
      continue;
    }
    ++r.cache_files_dropped;
    r.cache_bytes_dropped += key.size;
  }
  r.elapsed_s = std::chrono::duration<double>(Clock::Real()->Now() - t0).count();
  GLOG_INFO(
      "sync: snapshot v{} -> v{}: {} files ({} added, {} removed, {} changed), {} cache "
      "files dropped, {:.2f} s",
      r.old_version, r.new_version, r.files, r.added, r.removed, r.changed, r.cache_files_dropped,
      r.elapsed_s);
  return r;
}

}  // namespace granary
