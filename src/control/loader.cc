// LoadJob, LoadManager and target resolution (see loader.h).
#include "control/loader.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "common/clock.h"

namespace granary {
namespace {

constexpr size_t kReportedPaths = 5;  // failures / missing paths kept in a result

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// The path field of a list line: the first whitespace-separated field.
std::string_view PathField(std::string_view line) {
  line = Trim(line);
  size_t end = line.find_first_of(" \t");
  return end == std::string_view::npos ? line : line.substr(0, end);
}

std::optional<uint64_t> FindFile(const Snapshot& snapshot, std::string_view path) {
  auto ino = snapshot.FindPath(path);
  if (!ino) return std::nullopt;
  auto e = snapshot.Get(*ino);
  if (!e || e->is_dir) return std::nullopt;
  return ino;
}

// A list line's file: relative to the root, to `base`, or with the origin prefix stripped.
std::optional<uint64_t> ResolveLine(const Snapshot& snapshot, std::string_view path,
                                    std::string_view base) {
  while (path.starts_with("./")) path.remove_prefix(2);
  if (auto ino = FindFile(snapshot, path)) return ino;
  if (!base.empty()) {
    std::string joined(base);
    joined += '/';
    joined += path;
    if (auto ino = FindFile(snapshot, joined)) return ino;
  }
  std::string_view prefix = snapshot.prefix();
  if (!prefix.empty() && path.starts_with(prefix))
    return FindFile(snapshot, path.substr(prefix.size()));
  return std::nullopt;
}

void AddSubtree(const Snapshot& snapshot, uint64_t ino, std::vector<uint64_t>& out) {
  auto e = snapshot.Get(ino);
  if (!e) return;
  if (!e->is_dir) {
    out.push_back(ino);
    return;
  }
  constexpr size_t kPage = 4096;
  for (uint64_t off = 0;; off += kPage) {
    auto children = snapshot.ReadDir(ino, off, kPage);
    for (const auto& c : children) AddSubtree(snapshot, c.ino, out);
    if (children.size() < kPage) break;
  }
}

}  // namespace

Result<LoadTargets> ResolveLoadTargets(const Snapshot& snapshot, const LoadRequest& request) {
  if (request.threads < 1 || request.threads > kMaxLoadThreads) {
    return InvalidArgument("load: threads must be 1.." + std::to_string(kMaxLoadThreads) +
                           ", not " + std::to_string(request.threads));
  }
  std::string base(Trim(request.path));
  while (!base.empty() && base.back() == '/') base.pop_back();
  while (!base.empty() && base.front() == '/') base.erase(0, 1);
  auto base_ino = snapshot.FindPath(base);
  if (!base_ino) return InvalidArgument("load: '" + base + "' is not in the dataset");

  LoadTargets t;
  if (request.list_lines.empty()) {
    if (base.empty()) {
      snapshot.ForEachFile([&](const EntryView& e) { t.inos.push_back(e.ino); });
    } else {
      AddSubtree(snapshot, *base_ino, t.inos);
    }
  } else {
    for (const std::string& line : request.list_lines) {
      std::string_view path = PathField(line);
      if (path.empty() || path.front() == '#') continue;
      if (auto ino = ResolveLine(snapshot, path, base)) {
        t.inos.push_back(*ino);
      } else {
        if (t.missing_paths.size() < kReportedPaths) t.missing_paths.emplace_back(path);
        ++t.missing;
      }
    }
  }
  std::sort(t.inos.begin(), t.inos.end());
  t.inos.erase(std::unique(t.inos.begin(), t.inos.end()), t.inos.end());
  for (uint64_t ino : t.inos) t.bytes += snapshot.Get(ino)->size;
  return t;
}

LoadJob::LoadJob(CacheEngine* engine, std::shared_ptr<const Snapshot> snapshot, LoadTargets targets,
                 int threads, bool check_only)
    : engine_(engine),
      snapshot_(std::move(snapshot)),
      targets_(std::move(targets)),
      threads_(std::max(1, threads)),
      check_only_(check_only),
      state_(targets_.inos.size()) {
  for (auto& s : state_) s.store(TargetState::kPending, std::memory_order_relaxed);
}

LoadJob::~LoadJob() {
  Cancel();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
}

void LoadJob::Start() {
  start_ = Clock::Real()->Now();
  int n = check_only_
              ? 1
              : static_cast<int>(std::min<size_t>(threads_, std::max<size_t>(1, state_.size())));
  running_workers_.store(n);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { Worker(); });
}

void LoadJob::Cancel() { cancelled_.store(true); }

void LoadJob::Worker() {
  if (!check_only_) {
    for (size_t i = next_.fetch_add(1); i < state_.size() && !cancelled_.load();
         i = next_.fetch_add(1)) {
      Handle(i);
    }
  }
  if (running_workers_.fetch_sub(1) == 1) {
    LoadResult r = Finish();
    MutexLock lock(mu_);
    result_ = std::move(r);
    finished_ = true;
    done_cv_.NotifyAll();
  }
}

void LoadJob::Handle(size_t i) {
  uint64_t ino = targets_.inos[i];
  uint64_t size = snapshot_->Get(ino)->size;
  TargetState st = TargetState::kDone;
  if (engine_->IsCached(*snapshot_, ino)) {
    files_skipped_.fetch_add(1);
    // A mount that keeps file pages (cached mode) gets it into its page
    // cache all the same: a fresh mount over a warm cache, loaded, serves
    // its first epoch like a mount loaded cold.
    engine_->PushCached(snapshot_, ino);
  } else {
    auto fetched = engine_->Fetch(snapshot_, ino, Priority::kLow);
    if (!fetched.ok()) {
      st = TargetState::kFailed;
      MutexLock lock(mu_);
      if (failures_.size() < kReportedPaths) {
        failures_.push_back({.path = snapshot_->Path(ino), .reason = fetched.status().ToString()});
      }
    } else if (!*fetched) {
      st = TargetState::kRefused;
    } else {
      bytes_fetched_.fetch_add(size);
      // In a cluster the object's owner keeps it; this node may hold no copy.
      if (!engine_->IsCached(*snapshot_, ino)) st = TargetState::kRemote;
    }
  }
  state_[i].store(st);
  bytes_done_.fetch_add(size);
  files_done_.fetch_add(1);
}

LoadResult LoadJob::Finish() {
  const Snapshot& snap = *snapshot_;
  LoadResult r{.files_requested = targets_.inos.size(),
               .bytes_requested = targets_.bytes,
               .missing = targets_.missing,
               .missing_paths = targets_.missing_paths,
               .cancelled = cancelled_.load()};
  for (size_t i = 0; i < state_.size(); ++i) {
    uint64_t ino = targets_.inos[i];
    uint64_t size = snap.Get(ino)->size;
    if (engine_->IsCached(snap, ino)) {
      ++r.files_cached;
      r.bytes_cached += size;
      continue;
    }
    switch (state_[i].load()) {
      case TargetState::kRemote:
        ++r.files_cached;
        r.bytes_cached += size;
        break;
      case TargetState::kPending: ++r.files_not_loaded; break;
      case TargetState::kFailed: ++r.files_failed; break;
      case TargetState::kDone:  // cached once, evicted since: no room for it either
      case TargetState::kRefused:
        ++r.files_not_fitted;
        r.bytes_not_fitted += size;
        break;
    }
  }
  r.elapsed_s = std::chrono::duration<double>(Clock::Real()->Now() - start_).count();
  MutexLock lock(mu_);
  r.failures = failures_;
  elapsed_s_ = r.elapsed_s;
  return r;
}

LoadResult LoadJob::Wait() {
  MutexLock lock(mu_);
  done_cv_.Wait(lock, [&]() REQUIRES(mu_) { return finished_; });
  return result_;
}

bool LoadJob::WaitFor(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  return done_cv_.WaitFor(lock, timeout, [&]() REQUIRES(mu_) { return finished_; });
}

bool LoadJob::finished() const {
  MutexLock lock(mu_);
  return finished_;
}

LoadProgress LoadJob::progress() const {
  LoadProgress p{.files_total = targets_.inos.size(),
                 .bytes_total = targets_.bytes,
                 .files_done = files_done_.load(),
                 .bytes_done = bytes_done_.load(),
                 .files_skipped = files_skipped_.load(),
                 .bytes_fetched = bytes_fetched_.load()};
  bool done;
  {
    MutexLock lock(mu_);
    done = finished_;
    p.elapsed_s =
        done ? elapsed_s_ : std::chrono::duration<double>(Clock::Real()->Now() - start_).count();
  }
  p.running = !done;
  if (p.elapsed_s > 0) {
    p.bytes_per_s = p.bytes_done / p.elapsed_s;
    p.files_per_s = p.files_done / p.elapsed_s;
  }
  if (done) {
    p.eta_s = 0;
  } else if (p.bytes_per_s > 0) {
    p.eta_s = (p.bytes_total - p.bytes_done) / p.bytes_per_s;
  }
  return p;
}

LoadManager::~LoadManager() {
  MutexLock lock(mu_);
  if (current_) current_->Cancel();
}

Result<std::shared_ptr<LoadJob>> LoadManager::Start(const LoadRequest& request) {
  MutexLock lock(mu_);
  if (current_ && !current_->finished()) {
    LoadProgress p = current_->progress();
    return Unavailable("a load is already running (" + std::to_string(p.files_done) + "/" +
                       std::to_string(p.files_total) + " files); wait for it or cancel it first");
  }
  std::shared_ptr<const Snapshot> snap = engine_->snapshot();
  ASSIGN_OR_RETURN(LoadTargets targets, ResolveLoadTargets(*snap, request));
  auto job = std::make_shared<LoadJob>(engine_, std::move(snap), std::move(targets),
                                       request.threads, request.check_only);
  job->Start();
  current_ = job;
  return job;
}

Status LoadManager::Cancel() {
  MutexLock lock(mu_);
  if (!current_ || current_->finished()) return NotFound("no load is running");
  current_->Cancel();
  return Status::Ok();
}

std::shared_ptr<LoadJob> LoadManager::current() const {
  MutexLock lock(mu_);
  return current_;
}

bool LoadManager::loading() const {
  MutexLock lock(mu_);
  return current_ && !current_->finished();
}

}  // namespace granary
