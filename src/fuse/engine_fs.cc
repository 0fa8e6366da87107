// EngineFs: FUSE operations mapped onto the cache engine (see engine_fs.h).
#include "fuse/engine_fs.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "common/log.h"
#include "common/replace_file.h"
#include "fuse/fuse_dispatch.h"

namespace granary {

EngineFs::EngineFs(CacheEngine* engine, EngineFsOptions options)
    : engine_(engine), options_(options), overlay_(options.overlay) {
  versions_.push_back(Version{.base = options.base, .snap = engine->snapshot()});
  dropped_below_ = options.stale_below;
}

NodeNumbering EngineFs::numbering() const {
  ReaderMutexLock lock(versions_mu_);
  const Version& v = versions_.back();
  return NodeNumbering{
      .version = v.snap->version(), .base = v.base, .next_base = v.base + v.snap->max_ino()};
}

Result<EngineFs::Resolved> EngineFs::Resolve(uint64_t node) const {
  ReaderMutexLock lock(versions_mu_);
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
  ReaderMutexLock lock(versions_mu_);
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
  if (overlay_ != nullptr) {
    ASSIGN_OR_RETURN(std::string dir_path, PathOf(parent));
    const std::string path =
        dir_path.empty() ? std::string(name) : dir_path + "/" + std::string(name);
    if (std::optional<Overlay::Entry> e = overlay_->Get(path)) {
      if (e->whiteout) return NotFound(std::string(name));
      return OverlayAttr(OverlayNode(path), path, *e);
    }
    if (parent >= kOverlayBase) {
      // A directory this mount made that a sync also found at the origin.
      std::shared_ptr<const Snapshot> snap;
      uint64_t base = 0;
      {
        ReaderMutexLock lock(versions_mu_);
        snap = versions_.back().snap;
        base = versions_.back().base;
      }
      std::optional<EntryView> e = OriginEntry(*snap, path);
      if (!e) return NotFound(std::string(name));
      return AttrOf(*snap, base, *e);
    }
  }
  ASSIGN_OR_RETURN(Resolved dir, Resolve(parent));
  std::optional<uint64_t> ino = dir.snap->Lookup(dir.ino, name);
  if (!ino) return NotFound(std::string(name));
  std::optional<EntryView> e = dir.snap->Get(*ino);
  if (!e) return NotFound(std::string(name));
  return AttrOf(*dir.snap, dir.base, *e);
}

Result<NodeAttr> EngineFs::GetAttr(uint64_t node) {
  if (MayBeOverlaid(node)) {
    ASSIGN_OR_RETURN(std::string path, PathOf(node));
    if (std::optional<Overlay::Entry> e = overlay_->Get(path); e && !e->whiteout) {
      return OverlayAttr(node, path, *e);
    }
    if (node >= kOverlayBase) return NotFound("node " + std::to_string(node));
  }
  ASSIGN_OR_RETURN(Resolved r, Resolve(node));
  std::optional<EntryView> e = r.snap->Get(r.ino);
  if (!e) return NotFound("node " + std::to_string(node));
  return AttrOf(*r.snap, r.base, *e);
}

Result<OpenResult> EngineFs::Open(uint64_t node, int flags) {
  opens_.fetch_add(1, std::memory_order_relaxed);
  if (MayBeOverlaid(node)) {
    ASSIGN_OR_RETURN(std::string path, PathOf(node));
    if (std::optional<Overlay::Entry> e = overlay_->Get(path); e && !e->whiteout) {
      if (e->is_dir) return InvalidArgument(path + " is a directory");
      return OpenResult{.fh = 0, .keep_cache = false};  // its bytes change with writes
    }
  }
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
  if (auto o = ReadOverlay(node, offset, out)) return *o;
  return ReadResolved(Resolve(node), offset, out, nullptr);
}

std::optional<Result<size_t>> EngineFs::TryRead(uint64_t node, uint64_t fh, uint64_t offset,
                                                std::span<char> out) {
  if (auto o = ReadOverlay(node, offset, out)) return *o;
  Result<Resolved> r = Resolve(node);
  if (!r.ok()) return ReadResolved(r, offset, out, nullptr);
  // One lookup of the object in the store: the hit is the read.
  std::optional<Result<size_t>> n = engine_->ReadLocal(r->snap, r->ino, offset, out);
  if (n && !n->ok()) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
    GLOG_WARN("read of '{}' at {} failed: {}", r->snap->Path(r->ino), offset,
              n->status().ToString());
  }
  return n;
}

Result<size_t> EngineFs::ReadCancellable(uint64_t node, uint64_t fh, uint64_t offset,
                                         std::span<char> out, CancelToken& cancel) {
  if (auto o = ReadOverlay(node, offset, out)) return *o;
  return ReadResolved(Resolve(node), offset, out, &cancel);
}

Result<size_t> EngineFs::ReadResolved(const Result<Resolved>& r, uint64_t offset,
                                      std::span<char> out, CancelToken* cancel) {
  bool beyond_cache = false;
  Result<size_t> n =
      r.ok() ? engine_->Read(r->snap, r->ino, offset, out, Priority::kHigh, cancel, &beyond_cache)
             : r.status();
  if (beyond_cache && track_misses_.load(std::memory_order_relaxed)) NoteMiss(r->base + r->ino);
  if (!n.ok() && n.status().code() == Code::kCancelled) return n;  // interrupted: not a failure
  if (!n.ok()) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
    GLOG_WARN("read of '{}' at {} failed: {}", r.ok() ? r->snap->Path(r->ino) : "?", offset,
              n.status().ToString());
  }
  return n;
}

void EngineFs::TrackMisses() {
  for (MissShard& s : missed_) {
    MutexLock lock(s.mu);
    s.nodes.clear();
  }
  track_misses_.store(true, std::memory_order_relaxed);
}

void EngineFs::NoteMiss(uint64_t node) {
  MissShard& s = missed_[node % kMissShards];
  MutexLock lock(s.mu);
  if (s.nodes.size() >= kMaxMissed) s.nodes.clear();
  s.nodes.insert(node);
}

bool EngineFs::TakeMiss(uint64_t node) {
  MissShard& s = missed_[node % kMissShards];
  MutexLock lock(s.mu);
  return s.nodes.erase(node) > 0;
}

Status EngineFs::ReadDir(uint64_t node, uint64_t offset, const DirEntrySink& emit) {
  if (overlay_ != nullptr) return ReadDirMerged(node, offset, emit);
  ASSIGN_OR_RETURN(Resolved r, Resolve(node));
  std::optional<EntryView> dir = r.snap->Get(r.ino);
  if (!dir) return NotFound("node " + std::to_string(node));
  if (!dir->is_dir) return InvalidArgument("node " + std::to_string(node) + " is not a directory");
  for (uint64_t pos = offset; pos < dir->child_count;) {
    std::vector<EntryView> page = r.snap->ReadDir(r.ino, pos, options_.readdir_page);
    if (page.empty()) break;
    for (const EntryView& child : page) {
      if (!emit(
              DirEntry{.name = std::string(child.name), .attr = AttrOf(*r.snap, r.base, child)})) {
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
  WriterMutexLock lock(versions_mu_);
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

// ---------------- the overlay of a writable mount ----------------

namespace {

// Write handles carry the opener's process id under this bit (an fh stays
// below 2^63; read handles are 0).
constexpr uint64_t kWriteHandle = 1ull << 62;

// The process (thread group) of thread `tid`, from /proc; `tid` when gone.
uint32_t ProcessOf(uint32_t tid) {
  std::ifstream in("/proc/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("Tgid:"))
      return static_cast<uint32_t>(std::strtoul(line.c_str() + 5, nullptr, 10));
  }
  return tid;
}

uint64_t WriteHandle(uint32_t pid) { return kWriteHandle | ProcessOf(pid); }

std::string JoinPath(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

// Status -> the errno a writer sees: FuseErrno's, except for failures of the
// staging dir or the upload that would read as a mistake in the writer's own
// call (EINVAL, ENOSYS, ESTALE): those are the I/O error they are to it.
int WriteErrno(const Status& s) {
  switch (s.code()) {
    case Code::kInvalidArgument:
    case Code::kUnimplemented:
    case Code::kStale: return EIO;
    default: return FuseErrno(s);
  }
}

// Paths in the overlay node journal: '\\' and '\n' escaped, one line each.
std::string EscapeLine(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string UnescapeLine(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      out += text[++i] == 'n' ? '\n' : text[i];
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace

uint64_t EngineFs::OverlayNode(const std::string& path) {
  MutexLock lock(overlay_mu_);
  auto [it, inserted] = overlay_ids_.try_emplace(path, 0);
  if (inserted) {
    it->second = next_overlay_++;
    overlay_paths_[it->second] = path;
    JournalOverlayNode(std::to_string(it->second) + "\t" + EscapeLine(path) + "\n");
  }
  return it->second;
}

void EngineFs::JournalOverlayNode(const std::string& line) {
  if (overlay_journal_fd_ < 0) return;
  if (::write(overlay_journal_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    GLOG_WARN("overlay node journal: {}; a restarted daemon may answer ENOENT for this file",
              std::strerror(errno));
  }
}

Status EngineFs::OpenOverlayNodeJournal(const std::string& path, bool restore) {
  MutexLock lock(overlay_mu_);
  if (restore) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const size_t tab = line.find('\t');
      if (tab == std::string::npos) continue;
      if (line.starts_with("-\t")) {
        const uint64_t id = std::strtoull(line.c_str() + 2, nullptr, 10);
        if (auto it = overlay_paths_.find(id); it != overlay_paths_.end()) {
          overlay_ids_.erase(it->second);
          overlay_paths_.erase(it);
        }
        continue;
      }
      const uint64_t id = std::strtoull(line.c_str(), nullptr, 10);
      if (id <= kOverlayBase) continue;
      const std::string p = UnescapeLine(std::string_view(line).substr(tab + 1));
      overlay_ids_[p] = id;
      overlay_paths_[id] = p;
      next_overlay_ = std::max(next_overlay_, id + 1);
    }
  }
  // What is left, compacted into a new file renamed over the old one.
  std::string text;
  for (const auto& [id, p] : overlay_paths_)
    text += std::to_string(id) + "\t" + EscapeLine(p) + "\n";
  RETURN_IF_ERROR(ReplaceFileContents(path, text));
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("overlay node journal " + path, errno);
  if (overlay_journal_fd_ >= 0) ::close(overlay_journal_fd_);
  overlay_journal_fd_ = fd;
  if (!overlay_paths_.empty()) {
    GLOG_INFO("overlay: {} node ids of new files and directories taken over",
              overlay_paths_.size());
  }
  return Status::Ok();
}

EngineFs::~EngineFs() {
  if (overlay_journal_fd_ >= 0) ::close(overlay_journal_fd_);
}

bool EngineFs::MayBeOverlaid(uint64_t node) const {
  return overlay_ != nullptr &&
         (node >= kOverlayBase || options_.allow_overwrite || options_.allow_delete);
}

std::optional<Result<size_t>> EngineFs::ReadOverlay(uint64_t node, uint64_t offset,
                                                    std::span<char> out) {
  if (!MayBeOverlaid(node)) return std::nullopt;
  Result<std::string> path = PathOf(node);
  if (!path.ok() || !overlay_->Get(*path)) return std::nullopt;
  return overlay_->Read(*path, offset, out);
}

void EngineFs::ForgetOverlayPath(const std::string& path) {
  MutexLock lock(overlay_mu_);
  if (auto it = overlay_ids_.find(path); it != overlay_ids_.end()) {
    JournalOverlayNode("-\t" + std::to_string(it->second) + "\n");
    overlay_paths_.erase(it->second);
    overlay_ids_.erase(it);
  }
}

int EngineFs::NewEntryPath(uint64_t parent, std::string_view name, std::string* path) {
  if (overlay_ == nullptr) return EROFS;
  Result<std::string> dir = PathOf(parent);
  if (!dir.ok()) return FuseErrno(dir.status());
  *path = JoinPath(*dir, name);
  std::optional<Overlay::Entry> e = overlay_->Get(*path);
  if ((e && !e->whiteout) || (!e && OriginEntry(*engine_->snapshot(), *path))) return EEXIST;
  return 0;
}

int EngineFs::MadeEntry(const Status& made, const std::string& path, NodeAttr* attr) {
  if (!made.ok()) return made.code() == Code::kInvalidArgument ? EEXIST : WriteErrno(made);
  std::optional<Overlay::Entry> e = overlay_->Get(path);
  if (!e) return EIO;
  *attr = OverlayAttr(OverlayNode(path), path, *e);
  return 0;
}

Result<std::string> EngineFs::PathOf(uint64_t node) const {
  if (node == kRootIno) return std::string();
  if (node >= kOverlayBase) {
    MutexLock lock(overlay_mu_);
    auto it = overlay_paths_.find(node);
    if (it == overlay_paths_.end()) return NotFound("node " + std::to_string(node));
    return it->second;
  }
  ASSIGN_OR_RETURN(Resolved r, Resolve(node));
  return r.snap->Path(r.ino);
}

NodeAttr EngineFs::OverlayAttr(uint64_t node, const std::string& path,
                               const Overlay::Entry& e) const {
  if (e.is_dir)
    return NodeAttr{.ino = node, .size = 4096, .mtime_ns = e.mtime_ns, .is_dir = true, .nlink = 2};
  return NodeAttr{.ino = node, .size = e.size, .mtime_ns = e.mtime_ns, .is_dir = false, .nlink = 1};
}

std::optional<EntryView> EngineFs::OriginEntry(const Snapshot& snap,
                                               const std::string& path) const {
  if (overlay_ != nullptr) {
    if (std::optional<Overlay::Entry> e = overlay_->Get(path); e && e->whiteout)
      return std::nullopt;
  }
  std::optional<uint64_t> ino = snap.FindPath(path);
  if (!ino) return std::nullopt;
  return snap.Get(*ino);
}

Status EngineFs::ReadDirMerged(uint64_t node, uint64_t offset, const DirEntrySink& emit) {
  ASSIGN_OR_RETURN(std::string path, PathOf(node));
  std::map<std::string, Overlay::Entry> extra = overlay_->Children(path);
  std::shared_ptr<const Snapshot> snap;
  uint64_t base = 0;
  std::optional<EntryView> dir;
  if (node < kOverlayBase) {
    ASSIGN_OR_RETURN(Resolved r, Resolve(node));
    snap = r.snap;
    base = r.base;
    dir = r.snap->Get(r.ino);
    if (!dir) return NotFound("node " + std::to_string(node));
    if (!dir->is_dir)
      return InvalidArgument("node " + std::to_string(node) + " is not a directory");
  } else {
    // An overlay directory: the origin may have it too (after a sync).
    {
      ReaderMutexLock lock(versions_mu_);
      snap = versions_.back().snap;
      base = versions_.back().base;
    }
    dir = OriginEntry(*snap, path);
    if (dir && !dir->is_dir) dir.reset();
  }
  // Position i: the snapshot's children first (hidden ones keep their
  // position and are skipped), then the overlay's new names in name order.
  const uint64_t snap_count = dir ? dir->child_count : 0;
  uint64_t pos = offset;
  for (; dir && pos < snap_count;) {
    std::vector<EntryView> page = snap->ReadDir(dir->ino, pos, options_.readdir_page);
    if (page.empty()) break;
    for (const EntryView& child : page) {
      ++pos;
      auto it = extra.find(std::string(child.name));
      if (it != extra.end()) {
        if (it->second.whiteout) continue;
        const std::string p = JoinPath(path, child.name);
        if (!emit(DirEntry{.name = it->first, .attr = OverlayAttr(OverlayNode(p), p, it->second)}))
          return Status::Ok();
        continue;
      }
      if (!emit(DirEntry{.name = std::string(child.name), .attr = AttrOf(*snap, base, child)}))
        return Status::Ok();
    }
  }
  pos = std::max(pos, snap_count);
  uint64_t i = snap_count;
  for (const auto& [name, e] : extra) {
    if (e.whiteout) continue;
    if (dir && snap->Lookup(dir->ino, name)) continue;  // shown at the snapshot's position
    if (i++ < pos) continue;
    const std::string p = JoinPath(path, name);
    if (!emit(DirEntry{.name = name, .attr = OverlayAttr(OverlayNode(p), p, e)}))
      return Status::Ok();
  }
  return Status::Ok();
}

int EngineFs::Adopt(const std::string& path, bool truncate) {
  if (!options_.allow_overwrite) return EPERM;
  auto snap = engine_->snapshot();
  std::optional<uint64_t> ino = snap->FindPath(path);
  if (!ino) return ENOENT;
  std::optional<EntryView> e = snap->Get(*ino);
  if (!e) return ENOENT;
  if (e->is_dir) return EISDIR;
  std::string data;
  if (!truncate) {
    data.resize(e->size);
    size_t done = 0;
    while (done < data.size()) {
      Result<size_t> n =
          engine_->Read(snap, *ino, done, std::span<char>(data.data() + done, data.size() - done));
      if (!n.ok()) return WriteErrno(n.status());
      if (*n == 0) break;
      done += *n;
    }
    data.resize(done);
  }
  Status s = overlay_->Adopt(path, data, truncate);
  if (!s.ok() && s.code() != Code::kInvalidArgument)
    return WriteErrno(s);  // exists: adopted meanwhile
  return 0;
}

int EngineFs::OpenForWrite(uint64_t node, int flags, uint32_t pid, OpenResult* out) {
  if (overlay_ == nullptr) return EROFS;
  Result<std::string> path = PathOf(node);
  if (!path.ok()) return FuseErrno(path.status());
  std::optional<Overlay::Entry> e = overlay_->Get(*path);
  if (e && e->whiteout) return ENOENT;
  if (e && e->is_dir) return EISDIR;
  if (!e) {
    if (int err = Adopt(*path, (flags & O_TRUNC) != 0); err != 0) return err;
  } else if (flags & O_TRUNC) {
    if (Status s = overlay_->Truncate(*path, 0); !s.ok()) return WriteErrno(s);
  }
  *out = OpenResult{.fh = WriteHandle(pid), .keep_cache = false};
  return 0;
}

int EngineFs::Create(uint64_t parent, std::string_view name, int flags, uint32_t pid,
                     NodeAttr* attr, OpenResult* out) {
  std::string path;
  if (int err = NewEntryPath(parent, name, &path); err != 0) return err;
  if (int err = MadeEntry(overlay_->Create(path), path, attr); err != 0) return err;
  *out = OpenResult{.fh = WriteHandle(pid), .keep_cache = false};
  return 0;
}

int EngineFs::Mkdir(uint64_t parent, std::string_view name, NodeAttr* attr) {
  std::string path;
  if (int err = NewEntryPath(parent, name, &path); err != 0) return err;
  return MadeEntry(overlay_->Mkdir(path), path, attr);
}

int EngineFs::Write(uint64_t node, uint64_t fh, uint64_t offset, std::span<const char> data,
                    size_t* written) {
  if (overlay_ == nullptr) return EROFS;
  Result<std::string> path = PathOf(node);
  if (!path.ok()) return FuseErrno(path.status());
  std::optional<Overlay::Entry> e = overlay_->Get(*path);
  if (!e) {
    // No OPEN came first (the `cached` read mode's no-open): adopt now.
    if (int err = Adopt(*path, false); err != 0) return err;
  } else if (e->whiteout) {
    return ENOENT;
  }
  Result<size_t> n = overlay_->Write(*path, offset, data);
  if (!n.ok()) return WriteErrno(n.status());
  *written = *n;
  return 0;
}

int EngineFs::CommitNode(uint64_t node) {
  if (overlay_ == nullptr) return 0;
  Result<std::string> path = PathOf(node);
  if (!path.ok()) return 0;
  std::optional<Overlay::Entry> e = overlay_->Get(*path);
  if (!e || e->is_dir || e->whiteout) return 0;
  return WriteErrno(overlay_->Commit(*path));
}

int EngineFs::Flush(uint64_t node, uint64_t fh, uint32_t pid) {
  // A forked child inherits the writer's descriptors and closes them (at
  // exec or exit) while the writer goes on writing: its close must not
  // upload a half-written file. Only the opening process's close does; the
  // last close of all (RELEASE) uploads whatever is left.
  if ((fh & kWriteHandle) != 0 && pid != 0 && ProcessOf(pid) != static_cast<uint32_t>(fh)) return 0;
  return CommitNode(node);
}

int EngineFs::Fsync(uint64_t node, uint64_t fh) { return CommitNode(node); }

void EngineFs::Release(uint64_t node, uint64_t fh) {
  if ((fh & kWriteHandle) == 0) return;
  // Nobody waits for a RELEASE: a failed upload stays pending (and retried
  // at the next close, fsync or mount), reported by `granary status`.
  if (int err = CommitNode(node); err != 0) {
    GLOG_WARN("upload after the last close of node {} failed ({}); the file stays pending", node,
              std::strerror(err));
  }
}

int EngineFs::SetAttr(uint64_t node, std::optional<uint64_t> size, bool mode_or_owner,
                      NodeAttr* attr) {
  if (overlay_ == nullptr) return EROFS;
  // Objects carry no mode or owner: chmod/chown (cp -p, mv across
  // filesystems) are accepted and change nothing (docs/semantics.md).
  (void)mode_or_owner;
  Result<std::string> path = PathOf(node);
  if (!path.ok()) return FuseErrno(path.status());
  if (size) {
    std::optional<Overlay::Entry> e = overlay_->Get(*path);
    if (e && e->is_dir) return EISDIR;
    if (!e) {
      if (int err = Adopt(*path, *size == 0); err != 0) return err;
    }
    if (Status s = overlay_->Truncate(*path, *size); !s.ok()) return WriteErrno(s);
  }
  Result<NodeAttr> a = GetAttr(node);
  if (!a.ok()) return FuseErrno(a.status());
  *attr = *a;
  return 0;
}

int EngineFs::Unlink(uint64_t parent, std::string_view name) {
  if (overlay_ == nullptr) return EROFS;
  Result<std::string> dir = PathOf(parent);
  if (!dir.ok()) return FuseErrno(dir.status());
  const std::string path = JoinPath(*dir, name);
  std::optional<Overlay::Entry> e = overlay_->Get(path);
  if (e && e->whiteout) return ENOENT;
  if (e && e->is_dir) return EISDIR;
  if (e) {
    Status s = overlay_->Unlink(path);
    if (!s.ok()) return WriteErrno(s);
    // An origin file this mount rewrote: the snapshot must not show it again.
    if (engine_->snapshot()->FindPath(path)) {
      if (Status w = overlay_->Whiteout(path); !w.ok()) return WriteErrno(w);
    }
  } else {
    auto snap = engine_->snapshot();
    std::optional<uint64_t> ino = snap->FindPath(path);
    std::optional<EntryView> origin = ino ? snap->Get(*ino) : std::nullopt;
    if (!origin) return ENOENT;
    if (origin->is_dir) return EISDIR;
    if (!options_.allow_delete) return EPERM;
    if (Status s = engine_->ufs().Delete(snap->Key(*ino)); !s.ok()) return WriteErrno(s);
    if (Status s = overlay_->Whiteout(path); !s.ok()) return WriteErrno(s);
  }
  ForgetOverlayPath(path);
  return 0;
}

int EngineFs::Rmdir(uint64_t parent, std::string_view name) {
  if (overlay_ == nullptr) return EROFS;
  Result<std::string> dir = PathOf(parent);
  if (!dir.ok()) return FuseErrno(dir.status());
  const std::string path = JoinPath(*dir, name);
  std::optional<Overlay::Entry> e = overlay_->Get(path);
  std::optional<EntryView> origin = OriginEntry(*engine_->snapshot(), path);
  if (!e || !e->is_dir) {
    if (origin && origin->is_dir) return origin->child_count > 0 ? ENOTEMPTY : EPERM;
    return origin ? ENOTDIR : ENOENT;
  }
  if (origin && origin->child_count > 0) return ENOTEMPTY;
  for (const auto& [child, ce] : overlay_->Children(path)) {
    if (!ce.whiteout) return ENOTEMPTY;
  }
  Status s = overlay_->Rmdir(path);
  if (!s.ok()) return s.code() == Code::kInvalidArgument ? ENOTEMPTY : WriteErrno(s);
  ForgetOverlayPath(path);
  return 0;
}

int EngineFs::Rename(uint64_t, std::string_view, uint64_t, std::string_view) {
  // Object stores have no rename; EXDEV makes mv(1) and shutil.move copy
  // the file and unlink the original instead (docs/semantics.md).
  return overlay_ == nullptr ? EROFS : EXDEV;
}

}  // namespace granary
