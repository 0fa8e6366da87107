// ApiService and Prefetcher (see service.h).
#include "api/service.h"

#include <unistd.h>

#include <algorithm>

#include "common/log.h"

namespace granary {

Result<std::string> NormalizeApiPath(std::string_view path) {
  std::string out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    if (part == "." || part == "..")
      return InvalidArgument("path '" + std::string(path) + "': '.' and '..' are not allowed");
    if (part.find('\0') != std::string_view::npos)
      return InvalidArgument("path contains a NUL byte");
    if (!part.empty()) {
      if (!out.empty()) out += '/';
      out += part;
    }
    i = j + 1;
  }
  return out;
}

// ---- Prefetcher ----

Prefetcher::Prefetcher(CacheEngine* engine, int threads)
    : engine_(engine), nthreads_(std::max(1, threads)) {}

Prefetcher::~Prefetcher() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();  // threads_ only grows under mu_, never after stop_
}

void Prefetcher::SetOrder(std::shared_ptr<const Snapshot> snap, std::vector<uint64_t> inos,
                          size_t window) {
  {
    MutexLock lock(mu_);
    ++generation_;
    snap_ = std::move(snap);
    order_ = std::move(inos);
    state_.assign(order_.size(), 0);
    index_.clear();
    index_.reserve(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) index_.try_emplace(order_[i], i);
    window_ = std::max<size_t>(1, window);
    next_ = 0;
    position_ = 0;
    ahead_ = 0;
    totals_.queued += order_.size();
    totals_.position = 0;
    if (threads_.empty())
      for (int i = 0; i < nthreads_; ++i) threads_.emplace_back([this] { Worker(); });
  }
  cv_.NotifyAll();
}

void Prefetcher::Advance(size_t to) {
  to = std::min(to, order_.size());
  for (size_t i = position_; i < to; ++i) {
    if (state_[i] == 1 && ahead_ > 0) --ahead_;
    // Not reached yet: the readers passed it, fetching it now is pointless.
    if (state_[i] == 0 && i >= next_) state_[i] = 2;
  }
  if (to > position_) position_ = to;
  if (next_ < position_) next_ = position_;
  totals_.position = position_;
}

void Prefetcher::NoteRead(uint64_t ino) {
  {
    MutexLock lock(mu_);
    if (order_.empty()) return;
    auto it = index_.find(ino);
    if (it == index_.end() || it->second < position_) return;
    Advance(it->second + 1);
  }
  cv_.NotifyAll();
}

size_t Prefetcher::touch_batch() const {
  MutexLock lock(mu_);
  if (position_ >= order_.size()) return kTouchBatch;
  return std::clamp<size_t>(window_ / 8, 1, kTouchBatch);
}

PrefetchProgress Prefetcher::progress() const {
  MutexLock lock(mu_);
  return totals_;
}

void Prefetcher::Worker() {
  MutexLock lock(mu_);
  for (;;) {
    cv_.Wait(lock,
             [&]() REQUIRES(mu_) { return stop_ || (next_ < order_.size() && ahead_ < window_); });
    if (stop_) return;
    const size_t i = next_++;
    const uint64_t gen = generation_;
    const uint64_t ino = order_[i];
    std::shared_ptr<const Snapshot> snap = snap_;
    if (engine_->IsCached(*snap, ino)) {
      state_[i] = 2;
      ++totals_.skipped;
      continue;
    }
    state_[i] = 1;
    ++ahead_;
    lock.Unlock();
    Result<bool> r = engine_->Fetch(snap, ino, Priority::kLow);
    lock.Lock();
    if (r.ok() && *r) {
      ++totals_.fetched;
    } else {
      ++totals_.failed;
      if (!r.ok()) GLOG_DEBUG("prefetch of inode {} failed: {}", ino, r.status().ToString());
      // A file that did not land in the cache holds no room ahead.
      if (gen == generation_ && state_[i] == 1) {
        state_[i] = 2;
        if (i >= position_ && ahead_ > 0) --ahead_;
      }
    }
  }
}

// ---- ApiService ----

ApiService::ApiService(CacheEngine* engine, int prefetch_threads)
    : engine_(engine), prefetcher_(engine, prefetch_threads) {}

ApiService::~ApiService() = default;

DatasetInfo ApiService::Info() const {
  auto snap = engine_->snapshot();
  return DatasetInfo{.source = snap->source_uri(),
                     .files = snap->file_count(),
                     .bytes = snap->total_bytes(),
                     .snapshot_version = snap->version(),
                     .attached = false};
}

Result<ApiService::Resolved> ApiService::Resolve(std::string_view path) const {
  ASSIGN_OR_RETURN(std::string rel, NormalizeApiPath(path));
  Resolved r;
  r.snap = engine_->snapshot();
  auto ino = r.snap->FindPath(rel);
  if (!ino) return NotFound("'" + rel + "': no such file or directory in the dataset");
  auto entry = r.snap->Get(*ino);
  if (!entry) return NotFound("'" + rel + "': no such file or directory in the dataset");
  r.ino = *ino;
  r.entry = *entry;
  return r;
}

Result<FileInfo> ApiService::Stat(std::string_view path) const {
  ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  return FileInfo{.path = r.snap->Path(r.ino),
                  .is_dir = r.entry.is_dir,
                  .size = r.entry.size,
                  .mtime_ns = r.entry.mtime_ns};
}

Result<std::vector<FileInfo>> ApiService::List(std::string_view dir, bool recursive) const {
  ASSIGN_OR_RETURN(Resolved r, Resolve(dir));
  if (!r.entry.is_dir) return InvalidArgument("'" + std::string(dir) + "': not a directory");
  const std::string base = r.snap->Path(r.ino);
  std::vector<FileInfo> out;
  // Depth-first in name order: a directory's files before the next sibling's.
  struct Frame {
    uint64_t ino;
    std::string prefix;
  };
  std::vector<Frame> stack{{r.ino, base.empty() ? "" : base + "/"}};
  constexpr size_t kChunk = 4096;
  while (!stack.empty()) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    std::vector<Frame> subdirs;
    for (uint64_t off = 0;; off += kChunk) {
      auto entries = r.snap->ReadDir(f.ino, off, kChunk);
      for (const EntryView& e : entries) {
        std::string p = f.prefix + std::string(e.name);
        if (e.is_dir) {
          if (recursive) {
            subdirs.push_back(Frame{e.ino, p + "/"});
            continue;
          }
        }
        out.push_back(FileInfo{
            .path = std::move(p), .is_dir = e.is_dir, .size = e.size, .mtime_ns = e.mtime_ns});
      }
      if (entries.size() < kChunk) break;
    }
    // Push in reverse so the first subdirectory is listed next.
    for (auto it = subdirs.rbegin(); it != subdirs.rend(); ++it) stack.push_back(std::move(*it));
  }
  return out;
}

Result<OpenedFile> ApiService::Open(std::string_view path) {
  ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (r.entry.is_dir) return InvalidArgument("'" + r.snap->Path(r.ino) + "': is a directory");
  opens_.fetch_add(1, std::memory_order_relaxed);
  prefetcher_.NoteRead(r.ino);
  OpenedFile out{.fd = -1, .size = r.entry.size, .ino = r.ino, .version = r.snap->version()};
  if (r.entry.size == 0) return out;
  if (!engine_->IsCached(*r.snap, r.ino)) {
    Result<bool> fetched = engine_->Fetch(r.snap, r.ino, Priority::kHigh);
    if (!fetched.ok()) return fetched.status().WithContext(r.snap->Path(r.ino));
    if (!*fetched) return out;  // the store refused it: read through the engine
  }
  Result<int> fd = engine_->OpenCachedFile(*r.snap, r.ino);
  if (fd.ok()) out.fd = *fd;
  // NotFound: evicted meanwhile, or cached by its owner elsewhere in the
  // cluster: read through the engine.
  return out;
}

Result<size_t> ApiService::Read(std::string_view path, uint64_t offset, std::span<char> out) {
  ASSIGN_OR_RETURN(Resolved r, Resolve(path));
  if (r.entry.is_dir) return InvalidArgument("'" + r.snap->Path(r.ino) + "': is a directory");
  prefetcher_.NoteRead(r.ino);
  if (offset >= r.entry.size || out.empty()) return size_t{0};
  size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), r.entry.size - offset));
  size_t done = 0;
  while (done < want) {
    Result<size_t> n = engine_->Read(r.snap, r.ino, offset + done, out.subspan(done, want - done));
    if (!n.ok()) return n.status().WithContext(r.snap->Path(r.ino));
    if (*n == 0) break;
    done += *n;
  }
  return done;
}

DirectLayout ApiService::Direct() const {
  auto snap = engine_->snapshot();
  return DirectLayout{.snapshot_path = snap->file_path(),
                      .version = snap->version(),
                      .dataset = engine_->dataset(),
                      .files = engine_->store().file_layout()};
}

uint64_t ApiService::NoteDirectReads(uint64_t version, const std::vector<uint64_t>& inos) {
  auto snap = engine_->snapshot();
  if (snap->version() != version) return snap->version();
  direct_reads_.fetch_add(inos.size(), std::memory_order_relaxed);
  for (uint64_t ino : inos) {
    // Marks the object used (NotFound: evicted since; nothing to mark).
    engine_->CachedFilePath(*snap, ino).status().IgnoreError();
    prefetcher_.NoteRead(ino);
  }
  return snap->version();
}

Status ApiService::Prefetch(const std::vector<std::string>& paths, size_t window) {
  if (window == 0) return InvalidArgument("prefetch window must be >= 1");
  auto snap = engine_->snapshot();
  std::vector<uint64_t> inos;
  inos.reserve(paths.size());
  for (const std::string& p : paths) {
    ASSIGN_OR_RETURN(std::string rel, NormalizeApiPath(p));
    auto ino = snap->FindPath(rel);
    if (!ino) return NotFound("prefetch: '" + rel + "': no such file in the dataset");
    auto e = snap->Get(*ino);
    if (!e || e->is_dir) return InvalidArgument("prefetch: '" + rel + "': is a directory");
    inos.push_back(*ino);
  }
  prefetcher_.SetOrder(std::move(snap), std::move(inos), window);
  return Status::Ok();
}

}  // namespace granary
