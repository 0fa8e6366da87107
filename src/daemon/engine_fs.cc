// EngineFs: FUSE operations mapped onto the cache engine (see engine_fs.h).
#include "daemon/engine_fs.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <set>

#include "common/log.h"

namespace granary {

EngineFs::EngineFs(CacheEngine* engine, EngineFsOptions options)
    : engine_(engine), snapshot_(engine->snapshot()), options_(options) {}

NodeAttr EngineFs::AttrOf(const EntryView& e) const {
  if (e.is_dir) {
    return NodeAttr{.ino = e.ino,
                    .size = 4096,
                    .mtime_ns = snapshot_.created_ns(),
                    .is_dir = true,
                    .nlink = 2};
  }
  return NodeAttr{.ino = e.ino, .size = e.size, .mtime_ns = e.mtime_ns, .is_dir = false, .nlink = 1};
}

Result<NodeAttr> EngineFs::Lookup(uint64_t parent, std::string_view name) {
  std::optional<uint64_t> ino = snapshot_.Lookup(parent, name);
  if (!ino) return NotFound(std::string(name));
  std::optional<EntryView> e = snapshot_.Get(*ino);
  if (!e) return NotFound(std::string(name));
  return AttrOf(*e);
}

Result<NodeAttr> EngineFs::GetAttr(uint64_t ino) {
  std::optional<EntryView> e = snapshot_.Get(ino);
  if (!e) return NotFound("inode " + std::to_string(ino));
  return AttrOf(*e);
}

Result<OpenResult> EngineFs::Open(uint64_t ino, int flags) {
  opens_.fetch_add(1, std::memory_order_relaxed);
  std::optional<EntryView> e = snapshot_.Get(ino);
  if (!e) return NotFound("inode " + std::to_string(ino));
  if (e->is_dir) return InvalidArgument("inode " + std::to_string(ino) + " is a directory");
  OpenResult out{.fh = 0, .keep_cache = true};
  if (!options_.offer_backing || !engine_->IsCached(ino)) return out;
  // OpenCachedFile verifies a recovered file's checksum before handing it out.
  Result<int> fd = engine_->OpenCachedFile(ino);
  if (!fd.ok()) return out;  // dropped or evicted meanwhile: userspace reads
  ::close(*fd);
  Result<CachedObjectInfo> info = engine_->store().Describe(engine_->KeyOf(*e));
  if (!info.ok() || !info->complete) return out;
  out.backing_path = info->path;
  backing_offers_.fetch_add(1, std::memory_order_relaxed);
  return out;
}

Result<size_t> EngineFs::Read(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out) {
  Result<size_t> n = engine_->Read(ino, offset, out);
  if (!n.ok()) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
    GLOG_WARN("read of '{}' at {} failed: {}", snapshot_.Path(ino), offset, n.status().ToString());
  }
  return n;
}

Status EngineFs::ReadDir(uint64_t ino, uint64_t offset, const DirEntrySink& emit) {
  std::optional<EntryView> dir = snapshot_.Get(ino);
  if (!dir) return NotFound("inode " + std::to_string(ino));
  if (!dir->is_dir) return InvalidArgument("inode " + std::to_string(ino) + " is not a directory");
  for (uint64_t pos = offset; pos < dir->child_count;) {
    std::vector<EntryView> page = snapshot_.ReadDir(ino, pos, options_.readdir_page);
    if (page.empty()) break;
    for (const EntryView& child : page) {
      if (!emit(DirEntry{.name = std::string(child.name), .attr = AttrOf(child)})) {
        return Status::Ok();
      }
    }
    pos += page.size();
  }
  return Status::Ok();
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
  out.total_files = snapshot_.file_count() + snapshot_.dir_count();
  out.free_files = 0;
  return out;
}

EngineFsStats EngineFs::stats() const {
  return EngineFsStats{.opens = opens_.load(std::memory_order_relaxed),
                       .backing_offers = backing_offers_.load(std::memory_order_relaxed),
                       .read_errors = read_errors_.load(std::memory_order_relaxed)};
}

}  // namespace granary
