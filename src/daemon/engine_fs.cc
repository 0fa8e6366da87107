// EngineFs: FUSE operations mapped onto the cache engine (see engine_fs.h).
#include "daemon/engine_fs.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <mutex>
#include <set>

#include "common/log.h"

namespace granary {

EngineFs::EngineFs(CacheEngine* engine, EngineFsOptions options)
    : engine_(engine), options_(options) {
  versions_.push_back(Version{.base = 0, .snap = engine->snapshot()});
}

Result<EngineFs::Resolved> EngineFs::Resolve(uint64_t node) const {
  std::shared_lock lock(versions_mu_);
  if (node == kRootIno) {
    return Resolved{.snap = versions_.back().snap, .base = versions_.back().base, .ino = kRootIno};
  }
  for (auto it = versions_.rbegin(); it != versions_.rend(); ++it) {
    if (node > it->base + kRootIno && node <= it->base + it->snap->max_ino()) {
      return Resolved{.snap = it->snap, .base = it->base, .ino = node - it->base};
    }
  }
  if (node <= dropped_below_) {
    stale_nodes_.fetch_add(1, std::memory_order_relaxed);
    return Stale("node " + std::to_string(node) + " belongs to a snapshot version replaced by " +
                 std::to_string(kKeptVersions) + " or more syncs; look the path up again");
  }
  return NotFound("node " + std::to_string(node));
}

uint64_t EngineFs::NodeOf(const Snapshot& snap, uint64_t ino) const {
  if (ino == kRootIno) return kRootIno;
  std::shared_lock lock(versions_mu_);
  for (auto it = versions_.rbegin(); it != versions_.rend(); ++it) {
    if (it->snap.get() == &snap) return it->base + ino;
  }
  return 0;
}

NodeAttr EngineFs::AttrOf(const Snapshot& snap, uint64_t base, const EntryView& e) const {
  const uint64_t node = e.ino == kRootIno ? kRootIno : base + e.ino;
  if (e.is_dir) {
    return NodeAttr{
        .ino = node, .size = 4096, .mtime_ns = snap.created_ns(), .is_dir = true, .nlink = 2};
  }
  return NodeAttr{.ino = node, .size = e.size, .mtime_ns = e.mtime_ns, .is_dir = false, .nlink = 1};
}

Result<NodeAttr> EngineFs::Lookup(uint64_t parent, std::string_view name) {
  ASSIGN_OR_RETURN(Resolved dir, Resolve(parent));
  std::optional<uint64_t> ino = dir.snap->Lookup(dir.ino, name);
  if (!ino) return NotFound(std::string(name));
  std::optional<EntryView> e = dir.snap->Get(*ino);
  if (!e) return NotFound(std::string(name));
  return AttrOf(*dir.snap, dir.base, *e);
}

Result<NodeAttr> EngineFs::GetAttr(uint64_t node) {
  ASSIGN_OR_RETURN(Resolved r, Resolve(node));
  std::optional<EntryView> e = r.snap->Get(r.ino);
  if (!e) return NotFound("node " + std::to_string(node));
  return AttrOf(*r.snap, r.base, *e);
}

Result<OpenResult> EngineFs::Open(uint64_t node, int flags) {
  opens_.fetch_add(1, std::memory_order_relaxed);
  ASSIGN_OR_RETURN(Resolved r, Resolve(node));
  std::optional<EntryView> e = r.snap->Get(r.ino);
  if (!e) return NotFound("node " + std::to_string(node));
  if (e->is_dir) return InvalidArgument("node " + std::to_string(node) + " is a directory");
  OpenResult out{.fh = 0, .keep_cache = true};
  if (!options_.offer_backing) return out;
  // Verifies a recovered file's checksum before handing it out; the FUSE
  // layer opens the path only when the inode has no backing file yet.
  Result<std::string> path = engine_->CachedFilePath(*r.snap, r.ino);
  if (!path.ok()) return out;  // not (completely) cached: userspace reads
  out.backing_path = std::move(*path);
  backing_offers_.fetch_add(1, std::memory_order_relaxed);
  return out;
}

Result<int> EngineFs::OpenBackingFile(uint64_t node, const std::string& /*backing_path*/) {
  // Not the path itself: the object may have been evicted and admitted
  // again (partly) since Open() named it; the store checks after opening.
  ASSIGN_OR_RETURN(Resolved r, Resolve(node));
  return engine_->OpenCachedFile(*r.snap, r.ino);
}

Result<size_t> EngineFs::Read(uint64_t node, uint64_t fh, uint64_t offset, std::span<char> out) {
  return ReadResolved(Resolve(node), offset, out, nullptr);
}

std::optional<Result<size_t>> EngineFs::TryRead(uint64_t node, uint64_t fh, uint64_t offset,
                                                std::span<char> out) {
  Result<Resolved> r = Resolve(node);  // once per READ: the read below reuses it
  if (r.ok() && !engine_->IsLocal(*r->snap, r->ino, offset, out.size())) return std::nullopt;
  return ReadResolved(r, offset, out, nullptr);
}

Result<size_t> EngineFs::ReadCancellable(uint64_t node, uint64_t fh, uint64_t offset,
                                         std::span<char> out, CancelToken& cancel) {
  return ReadResolved(Resolve(node), offset, out, &cancel);
}

Result<size_t> EngineFs::ReadResolved(const Result<Resolved>& r, uint64_t offset,
                                      std::span<char> out, CancelToken* cancel) {
  Result<size_t> n =
      r.ok() ? engine_->Read(r->snap, r->ino, offset, out, Priority::kHigh, cancel) : r.status();
  if (!n.ok() && n.status().code() == Code::kCancelled) return n;  // interrupted: not a failure
  if (!n.ok()) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
    GLOG_WARN("read of '{}' at {} failed: {}", r.ok() ? r->snap->Path(r->ino) : "?", offset,
              n.status().ToString());
  }
  return n;
}

Status EngineFs::ReadDir(uint64_t node, uint64_t offset, const DirEntrySink& emit) {
  ASSIGN_OR_RETURN(Resolved r, Resolve(node));
  std::optional<EntryView> dir = r.snap->Get(r.ino);
  if (!dir) return NotFound("node " + std::to_string(node));
  if (!dir->is_dir) return InvalidArgument("node " + std::to_string(node) + " is not a directory");
  for (uint64_t pos = offset; pos < dir->child_count;) {
    std::vector<EntryView> page = r.snap->ReadDir(r.ino, pos, options_.readdir_page);
    if (page.empty()) break;
    for (const EntryView& child : page) {
      if (!emit(DirEntry{.name = std::string(child.name), .attr = AttrOf(*r.snap, r.base, child)})) {
        return Status::Ok();
      }
    }
    pos += page.size();
  }
  return Status::Ok();
}

std::vector<std::string> EngineFs::AddVersion(std::shared_ptr<const Snapshot> next) {
  std::set<std::string> names;
  auto add_root_names = [&](const Snapshot& snap) {
    for (uint64_t pos = 0;;) {
      std::vector<EntryView> page = snap.ReadDir(kRootIno, pos, 4096);
      if (page.empty()) break;
      for (const EntryView& e : page) names.emplace(e.name);
      pos += page.size();
    }
  };
  std::unique_lock lock(versions_mu_);
  const Version& last = versions_.back();
  add_root_names(*last.snap);
  add_root_names(*next);
  versions_.push_back(Version{.base = last.base + last.snap->max_ino(), .snap = std::move(next)});
  while (versions_.size() > kKeptVersions) {
    dropped_below_ = versions_.front().base + versions_.front().snap->max_ino();
    versions_.erase(versions_.begin());
  }
  return {names.begin(), names.end()};
}

Result<StatFsResult> EngineFs::StatFs() {
  StoreStats st = engine_->store().stats();
  StatFsResult out;
  std::set<unsigned long> seen_fs;  // a quota larger than its disk reports the disk
  for (const TierStats& t : st.tiers) {
    uint64_t free = t.quota > t.used_bytes ? t.quota - t.used_bytes : 0;
    struct statvfs vfs {};
    if (::statvfs(t.path.c_str(), &vfs) == 0 && seen_fs.insert(vfs.f_fsid).second) {
      free = std::min<uint64_t>(free, static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize);
    }
    out.total_bytes += t.quota;
    out.free_bytes += free;
  }
  std::shared_ptr<const Snapshot> snap = engine_->snapshot();
  out.total_files = snap->file_count() + snap->dir_count();
  out.free_files = 0;
  return out;
}

EngineFsStats EngineFs::stats() const {
  return EngineFsStats{.opens = opens_.load(std::memory_order_relaxed),
                       .backing_offers = backing_offers_.load(std::memory_order_relaxed),
                       .read_errors = read_errors_.load(std::memory_order_relaxed),
                       .stale_nodes = stale_nodes_.load(std::memory_order_relaxed)};
}

}  // namespace granary
