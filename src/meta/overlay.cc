// Overlay (see overlay.h).
#include "meta/overlay.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/file_modes.h"
#include "common/log.h"
#include "common/replace_file.h"

namespace granary {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int64_t NowNs() { return Clock::Real()->WallNanos(); }

std::string ParentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::string NameOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status Errno(const std::string& what, int err) {
  if (err == ENOSPC || err == EDQUOT) return NoSpace(what + ": " + std::strerror(err));
  return IoError(what + ": " + std::strerror(err));
}

}  // namespace

struct Overlay::File {
  Mutex mu;  // guards everything below; taken before Overlay::mu_
  uint64_t id GUARDED_BY(mu) = 0;
  std::string path GUARDED_BY(mu);
  int fd GUARDED_BY(mu) = -1;
  uint64_t size GUARDED_BY(mu) = 0;
  int64_t mtime_ns GUARDED_BY(mu) = 0;
  bool dirty GUARDED_BY(mu) = false;  // changed since the last upload (or never uploaded)
  // Dirty, and closed or fsynced since its last change: upload it.
  bool sealed GUARDED_BY(mu) = false;
  bool uploaded GUARDED_BY(mu) = false;  // an object of this path exists at the origin
  bool removed GUARDED_BY(mu) = false;   // unlinked or folded: no more I/O
  // Streaming (S3): a multipart upload whose parts go out while a sequential
  // writer is still writing; bytes [0, streamed) were added to it as parts.
  std::unique_ptr<StreamingUpload> upload GUARDED_BY(mu);
  uint64_t streamed GUARDED_BY(mu) = 0;
  // A write that was not an append since the last upload: no new parts.
  bool stream_off GUARDED_BY(mu) = false;
  ~File() {
    upload.reset();  // aborts an unfinished upload
    if (fd >= 0) ::close(fd);
  }
};

Overlay::Overlay(OverlayOptions options, std::shared_ptr<UnderStorage> ufs)
    : options_(std::move(options)), ufs_(std::move(ufs)) {}

Overlay::~Overlay() = default;

Result<std::unique_ptr<Overlay>> Overlay::Open(OverlayOptions options,
                                               std::shared_ptr<UnderStorage> ufs) {
  if (options.staging_dir.empty()) return InvalidArgument("overlay: staging_dir is empty");
  if (!ufs) return InvalidArgument("overlay: no origin");
  std::error_code ec;
  fs::create_directories(options.staging_dir, ec);
  if (ec) return IoError("staging dir " + options.staging_dir + ": " + ec.message());
  ::chmod(options.staging_dir.c_str(), 0700);
  auto o = std::unique_ptr<Overlay>(new Overlay(std::move(options), std::move(ufs)));
  RETURN_IF_ERROR(o->Load());
  return o;
}

Status Overlay::WriteMeta(const File& f) const REQUIRES(f.mu) {
  json j = {{"v", 1},
            {"kind", "file"},
            {"path", f.path},
            {"dirty", f.dirty},
            {"sealed", f.sealed},
            {"uploaded", f.uploaded},
            {"mtime_ns", f.mtime_ns}};
  // A crash leaves this multipart upload unfinished: the next mount aborts it.
  if (f.upload) j["upload_id"] = f.upload->id();
  return ReplaceFileContents(options_.staging_dir + "/" + std::to_string(f.id) + ".meta", j.dump(),
                             {.durable = true, .mode = kCacheFileMode})
      .WithContext("staging");
}

static Status WriteSmallMeta(const std::string& dir, uint64_t id, const json& j) {
  return ReplaceFileContents(dir + "/" + std::to_string(id) + ".meta", j.dump(),
                             {.durable = true, .mode = kCacheFileMode})
      .WithContext("staging");
}

Status Overlay::Load() {
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(options_.staging_dir, ec)) {
    const std::string name = de.path().filename().string();
    if (name.ends_with(".tmp")) {
      fs::remove(de.path(), ec);
      continue;
    }
    if (!name.ends_with(".meta")) continue;
    char* end = nullptr;
    const uint64_t id = std::strtoull(name.c_str(), &end, 10);
    const std::string base = options_.staging_dir + "/" + std::to_string(id);
    std::ifstream in(de.path());
    json j = json::parse(in, nullptr, false);
    const bool good = id > 0 && j.is_object() && j.value("v", 0) == 1 && j.contains("path") &&
                      j["path"].is_string() && !j["path"].get<std::string>().empty();
    if (!good) {
      GLOG_WARN("staging: {} is not a valid staged-file description; removed", de.path().string());
      fs::remove(de.path(), ec);
      fs::remove(base + ".data", ec);
      continue;
    }
    next_id_ = std::max(next_id_, id + 1);
    const std::string path = j["path"].get<std::string>();
    const std::string kind = j.value("kind", std::string("file"));
    const int64_t mtime = j.value("mtime_ns", int64_t{0});
    if (kind == "dir") {
      dirs_[path] = Dir{.mtime_ns = mtime, .id = id};
      continue;
    }
    if (kind == "whiteout") {
      whiteouts_[path] = mtime;
      continue;
    }
    auto f = std::make_shared<File>();
    f->id = id;
    f->path = path;
    f->fd = ::open((base + ".data").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (f->fd < 0 || ::fstat(f->fd, &st) != 0) {
      GLOG_WARN("staging: {}: staged data {} is missing; the file is dropped", path,
                base + ".data");
      fs::remove(de.path(), ec);
      continue;
    }
    f->size = static_cast<uint64_t>(st.st_size);
    f->mtime_ns = mtime;
    f->dirty = j.value("dirty", true);
    f->sealed = f->dirty && j.value("sealed", false);
    f->uploaded = j.value("uploaded", false);
    if (auto id = j.find("upload_id"); id != j.end() && id->is_string()) {
      stale_uploads_.emplace_back(options_.prefix + path, id->get<std::string>());
    }
    if (f->dirty && options_.discard_pending) {
      GLOG_WARN("staging: {} ({} bytes, not uploaded) discarded (--discard-pending)", path,
                f->size);
      fs::remove(base + ".data", ec);
      fs::remove(de.path(), ec);
      continue;
    }
    staged_bytes_ += f->size;
    files_[path] = std::move(f);
  }
  for (const auto& [path, f] : files_) {
    for (std::string d = ParentOf(path); !d.empty(); d = ParentOf(d))
      dirs_.try_emplace(d, Dir{.mtime_ns = f->mtime_ns});
  }
  return Status::Ok();
}

std::optional<Overlay::Entry> Overlay::Get(const std::string& path) const {
  std::shared_ptr<File> f;
  {
    MutexLock lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) {
      if (auto d = dirs_.find(path); d != dirs_.end())
        return Entry{.is_dir = true, .mtime_ns = d->second.mtime_ns};
      if (auto w = whiteouts_.find(path); w != whiteouts_.end()) return Entry{.whiteout = true};
      return std::nullopt;
    }
    f = it->second;
  }
  MutexLock lock(f->mu);
  return Entry{.size = f->size, .mtime_ns = f->mtime_ns};
}

std::map<std::string, Overlay::Entry> Overlay::Children(const std::string& dir) const {
  std::map<std::string, Entry> out;
  std::vector<std::shared_ptr<File>> files;
  {
    MutexLock lock(mu_);
    const std::string prefix = dir.empty() ? "" : dir + "/";
    auto direct = [&](const std::string& p) {
      return p.size() > prefix.size() && p.starts_with(prefix) &&
             p.find('/', prefix.size()) == std::string::npos;
    };
    for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && it->first.starts_with(prefix);
         ++it)
      if (direct(it->first))
        out[it->first.substr(prefix.size())] =
            Entry{.is_dir = true, .mtime_ns = it->second.mtime_ns};
    for (auto it = whiteouts_.lower_bound(prefix);
         it != whiteouts_.end() && it->first.starts_with(prefix); ++it)
      if (direct(it->first)) out[it->first.substr(prefix.size())] = Entry{.whiteout = true};
    for (auto it = files_.lower_bound(prefix); it != files_.end() && it->first.starts_with(prefix);
         ++it)
      if (direct(it->first)) files.push_back(it->second);
  }
  for (const auto& f : files) {
    MutexLock lock(f->mu);
    if (!f->removed) out[NameOf(f->path)] = Entry{.size = f->size, .mtime_ns = f->mtime_ns};
  }
  return out;
}

std::shared_ptr<Overlay::File> Overlay::FileOf(const std::string& path) const {
  MutexLock lock(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? nullptr : it->second;
}

Status Overlay::NewFile(const std::string& path, std::span<const char> initial, bool dirty,
                        bool uploaded) {
  if (staged_bytes_.load() + initial.size() > options_.quota)
    return NoSpace(path + ": the staging quota (" + std::to_string(options_.quota) +
                   " bytes) is full");
  auto f = std::make_shared<File>();
  MutexLock file_lock(f->mu);  // uncontended: no other thread sees f before files_ holds it
  {
    MutexLock lock(mu_);
    if (files_.count(path) || dirs_.count(path)) return InvalidArgument(path + ": exists");
    f->id = next_id_++;
  }
  f->path = path;
  f->mtime_ns = NowNs();
  f->dirty = dirty;
  f->uploaded = uploaded;
  const std::string data = options_.staging_dir + "/" + std::to_string(f->id) + ".data";
  f->fd = ::open(data.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (f->fd < 0) return Errno("staging: " + data, errno);
  size_t done = 0;
  while (done < initial.size()) {
    ssize_t n =
        ::pwrite(f->fd, initial.data() + done, initial.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = Errno("staging: " + data, errno);
      ::unlink(data.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  f->size = initial.size();
  if (Status s = WriteMeta(*f); !s.ok()) {
    ::unlink(data.c_str());
    return s;
  }
  staged_bytes_ += f->size;
  MutexLock lock(mu_);
  whiteouts_.erase(path);
  files_[path] = std::move(f);
  return Status::Ok();
}

Status Overlay::Create(const std::string& path) { return NewFile(path, {}, /*dirty=*/true, false); }

Status Overlay::Adopt(const std::string& path, std::span<const char> initial, bool changed) {
  return NewFile(path, initial, changed, /*uploaded=*/true);
}

Status Overlay::Mkdir(const std::string& path) {
  uint64_t id;
  const int64_t now = NowNs();
  {
    MutexLock lock(mu_);
    if (files_.count(path) || dirs_.count(path)) return InvalidArgument(path + ": exists");
    id = next_id_++;
    dirs_[path] = Dir{.mtime_ns = now, .id = id};
  }
  Status s = WriteSmallMeta(options_.staging_dir, id,
                            {{"v", 1}, {"kind", "dir"}, {"path", path}, {"mtime_ns", now}});
  if (!s.ok()) {
    MutexLock lock(mu_);
    dirs_.erase(path);
  }
  return s;
}

void Overlay::DropFile(const std::shared_ptr<File>& f) REQUIRES(f->mu) {
  const std::string base = options_.staging_dir + "/" + std::to_string(f->id);
  ::unlink((base + ".meta").c_str());
  ::unlink((base + ".data").c_str());
  staged_bytes_ -= std::min(staged_bytes_.load(), f->size);
  f->removed = true;
  f->upload.reset();
}

Status Overlay::Unlink(const std::string& path) {
  std::shared_ptr<File> f = FileOf(path);
  if (!f) return NotFound(path);
  MutexLock lock(f->mu);
  if (f->removed) return NotFound(path);
  if (f->uploaded) {
    RETURN_IF_ERROR(ufs_->Delete(options_.prefix + path));
    ++deletes_;
  }
  DropFile(f);
  MutexLock maps(mu_);
  files_.erase(path);
  return Status::Ok();
}

Status Overlay::Whiteout(const std::string& path) {
  uint64_t id;
  const int64_t now = NowNs();
  {
    MutexLock lock(mu_);
    id = next_id_++;
    whiteouts_[path] = now;
  }
  ++deletes_;
  return WriteSmallMeta(options_.staging_dir, id,
                        {{"v", 1}, {"kind", "whiteout"}, {"path", path}, {"mtime_ns", now}});
}

Status Overlay::Rmdir(const std::string& path) {
  MutexLock lock(mu_);
  auto dir = dirs_.find(path);
  if (dir == dirs_.end()) return NotFound(path);
  const std::string prefix = path + "/";
  auto f = files_.lower_bound(prefix);
  auto d = dirs_.lower_bound(prefix);
  if ((f != files_.end() && f->first.starts_with(prefix)) ||
      (d != dirs_.end() && d->first.starts_with(prefix)))
    return InvalidArgument(path + ": directory not empty");
  if (dir->second.id != 0) {
    ::unlink((options_.staging_dir + "/" + std::to_string(dir->second.id) + ".meta").c_str());
  }
  dirs_.erase(dir);
  return Status::Ok();
}

Result<size_t> Overlay::Write(const std::string& path, uint64_t offset,
                              std::span<const char> data) {
  std::shared_ptr<File> f = FileOf(path);
  if (!f) return NotFound(path);
  MutexLock lock(f->mu);
  if (f->removed) return NotFound(path);
  const uint64_t end = offset + data.size();
  const uint64_t growth = end > f->size ? end - f->size : 0;
  if (growth > 0 && staged_bytes_.load() + growth > options_.quota)
    return NoSpace(path + ": the staging quota (" + std::to_string(options_.quota) +
                   " bytes) is full");
  if (offset < f->streamed) DropUpload(*f);  // parts already sent change: they are stale
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::pwrite(f->fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("staging: " + path, errno);
    done += static_cast<size_t>(n);
  }
  const uint64_t old_size = f->size;
  if (end > f->size) {
    staged_bytes_ += end - f->size;
    f->size = end;
  }
  f->mtime_ns = NowNs();
  if (!f->dirty || f->sealed) {
    f->dirty = true;
    f->sealed = false;  // changed after its close: not complete until the next one
    RETURN_IF_ERROR(WriteMeta(*f));
  }
  if (offset != old_size) f->stream_off = true;
  if (!f->stream_off) StreamParts(*f);
  return done;
}

Result<size_t> Overlay::Read(const std::string& path, uint64_t offset, std::span<char> out) const {
  std::shared_ptr<File> f = FileOf(path);
  if (!f) return NotFound(path);
  MutexLock lock(f->mu);
  if (f->removed) return NotFound(path);
  if (offset >= f->size) return size_t{0};
  size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), f->size - offset));
  size_t done = 0;
  while (done < want) {
    ssize_t n = ::pread(f->fd, out.data() + done, want - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("staging: " + path, errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Status Overlay::Truncate(const std::string& path, uint64_t size) {
  std::shared_ptr<File> f = FileOf(path);
  if (!f) return NotFound(path);
  MutexLock lock(f->mu);
  if (f->removed) return NotFound(path);
  if (size > f->size && staged_bytes_.load() + (size - f->size) > options_.quota)
    return NoSpace(path + ": the staging quota (" + std::to_string(options_.quota) +
                   " bytes) is full");
  if (size < f->streamed) DropUpload(*f);
  f->stream_off = true;
  if (::ftruncate(f->fd, static_cast<off_t>(size)) != 0) return Errno("staging: " + path, errno);
  if (size > f->size) {
    staged_bytes_ += size - f->size;
  } else {
    staged_bytes_ -= std::min(staged_bytes_.load(), f->size - size);
  }
  f->size = size;
  f->mtime_ns = NowNs();
  if (!f->dirty || f->sealed) {
    f->dirty = true;
    f->sealed = false;
    RETURN_IF_ERROR(WriteMeta(*f));
  }
  return Status::Ok();
}

Status Overlay::BeginUpload(File& f) REQUIRES(f.mu) {
  if (!streaming_.load(std::memory_order_relaxed)) return Status::Ok();
  auto up = ufs_->StartUpload(options_.prefix + f.path, f.fd, options_.upload);
  if (!up.ok()) {
    f.stream_off = true;
    if (up.status().code() != Code::kUnimplemented) return up.status();
    streaming_ = false;  // this origin has none (POSIX): whole-file writes from now on
    return Status::Ok();
  }
  f.upload = std::move(*up);
  f.streamed = 0;
  if (Status s = WriteMeta(f); !s.ok()) GLOG_WARN("staging: {}: {}", f.path, s.ToString());
  return Status::Ok();
}

void Overlay::StreamParts(File& f) REQUIRES(f.mu) {
  const uint64_t part = options_.upload.part_size;
  if (f.size < f.streamed + part || f.streamed >= kMaxParts * part) return;
  if (!f.upload) {
    if (Status s = BeginUpload(f); !s.ok()) {
      GLOG_WARN("upload of {}: starting a multipart upload failed ({}); the file is sent at close",
                f.path, s.ToString());
    }
    if (!f.upload) return;
  }
  while (f.size >= f.streamed + part && f.streamed < kMaxParts * part) {
    f.upload->AddPart(f.streamed / part);
    f.streamed += part;
  }
}

void Overlay::DropUpload(File& f) REQUIRES(f.mu) {
  f.upload.reset();  // aborts it (after the parts in flight)
  f.streamed = 0;
  f.stream_off = true;
}

Status Overlay::CommitFile(File& f) REQUIRES(f.mu) {
  if (f.removed || !f.dirty) return Status::Ok();
  if (::fsync(f.fd) != 0) return Errno("staging: " + f.path, errno);
  if (!f.sealed) {
    // The writer closed (or fsynced) it: these bytes are the file. Recorded
    // before the upload, so a crash from here on uploads them at the next
    // mount, and a crash before (a writer that never closed) uploads nothing.
    f.sealed = true;
    RETURN_IF_ERROR(WriteMeta(f));
  }
  const auto start = Clock::Real()->Now();
  const uint64_t part = options_.upload.part_size;
  if (f.upload && f.size > kMaxParts * part)
    DropUpload(f);  // too many parts: Write picks bigger ones
  // A large file not streamed yet goes as a recorded multipart upload too,
  // so a crash during it leaves an upload the next mount can abort.
  Status begun;
  if (!f.upload && f.size > part && f.size <= kMaxParts * part) begun = BeginUpload(f);
  Result<ObjectInfo> r = !begun.ok() ? Result<ObjectInfo>(begun)
                         : f.upload
                             ? ufs_->CompleteUpload(*f.upload, f.size)
                             : ufs_->Write(options_.prefix + f.path, f.fd, f.size, options_.upload);
  f.upload.reset();  // completed, or aborted on a failure
  f.streamed = 0;
  f.stream_off = false;
  upload_ns_ += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::Real()->Now() - start).count());
  if (!r.ok()) {
    ++upload_failures_;
    GLOG_WARN("upload of {} ({} bytes) failed: {}; the staged data is kept and retried", f.path,
              f.size, r.status().ToString());
    return r.status();
  }
  // The object is at the origin and the staged bytes are clean (fsynced
  // above, and writes wait for this lock): none need stay in memory. This
  // also takes what the per-part release missed (a page someone held while
  // it ran) and small files sent in one PUT.
  if (options_.upload.release_sent) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  ++uploads_;
  uploaded_bytes_ += f.size;
  f.dirty = false;
  f.sealed = false;
  f.uploaded = true;
  return WriteMeta(f);
}

Status Overlay::Commit(const std::string& path) {
  std::shared_ptr<File> f = FileOf(path);
  if (!f) return NotFound(path);
  MutexLock lock(f->mu);
  return CommitFile(*f);
}

void Overlay::RemoveOriginTemps(const std::string& path) const {
  // POSIX origins: a temporary name ".<name>.granary-<pid>-<rand>" a killed
  // upload left beside the target.
  const std::string dir = ParentOf(options_.prefix + path);
  const std::string temp_start = "." + NameOf(path) + ".granary-";
  auto page = ufs_->List(ListRequest{.prefix = dir.empty() ? "" : dir + "/", .delimiter = "/"});
  if (!page.ok()) return;
  for (const ObjectInfo& o : page->objects) {
    if (NameOf(o.key).starts_with(temp_start)) {
      GLOG_INFO("staging: removing {} left at the origin by an interrupted upload", o.key);
      ufs_->Delete(o.key).IgnoreError();
    }
  }
}

Status Overlay::RecoverPending() {
  std::vector<std::shared_ptr<File>> pending;
  std::vector<std::pair<std::string, std::string>> stale;
  {
    MutexLock lock(mu_);
    for (const auto& [path, f] : files_) pending.push_back(f);
    stale.swap(stale_uploads_);
  }
  for (const auto& [key, id] : stale) {
    Status s = ufs_->AbortUpload(key, id);
    GLOG_INFO("staging: aborting the multipart upload of {} a stop left unfinished: {}", key,
              s.ok() ? "done" : s.ToString());
  }
  Status first;
  for (const auto& f : pending) {
    MutexLock lock(f->mu);
    if (!f->dirty || f->removed) continue;
    if (!f->sealed) {
      GLOG_WARN(
          "staging: {} ({} bytes) was being written when the daemon stopped and never "
          "closed: not uploaded (open and close it to upload it, or mount with "
          "--discard-pending to drop it)",
          f->path, f->size);
      continue;
    }
    if (ufs_->Root() == "file:///") RemoveOriginTemps(f->path);
    Status s = CommitFile(*f);
    if (!s.ok() && first.ok()) first = s.WithContext("pending upload of " + f->path);
  }
  return first;
}

void Overlay::Fold(const std::function<bool(const std::string& path)>& in_snapshot) {
  std::vector<std::shared_ptr<File>> all;
  {
    MutexLock lock(mu_);
    for (const auto& [path, f] : files_) all.push_back(f);
  }
  for (const auto& f : all) {
    MutexLock lock(f->mu);
    if (f->dirty || f->removed || !in_snapshot(f->path)) continue;
    DropFile(f);
    MutexLock maps(mu_);
    files_.erase(f->path);
  }
  MutexLock lock(mu_);
  for (auto it = whiteouts_.begin(); it != whiteouts_.end();) {
    it = in_snapshot(it->first) ? std::next(it) : whiteouts_.erase(it);
  }
}

OverlayStats Overlay::stats() const {
  OverlayStats s;
  std::vector<std::shared_ptr<File>> all;
  {
    MutexLock lock(mu_);
    s.dirs = dirs_.size();
    for (const auto& [path, f] : files_) all.push_back(f);
  }
  for (const auto& f : all) {
    MutexLock lock(f->mu);
    if (f->removed) continue;
    ++s.files;
    if (f->dirty) {
      ++s.pending_files;
      s.pending_bytes += f->size;
      if (!f->sealed) ++s.unclosed_files;
    }
  }
  s.staged_bytes = staged_bytes_.load();
  s.uploads = uploads_.load();
  s.upload_failures = upload_failures_.load();
  s.uploaded_bytes = uploaded_bytes_.load();
  s.upload_seconds = static_cast<double>(upload_ns_.load()) / 1e9;
  s.deletes = deletes_.load();
  return s;
}

}  // namespace granary
