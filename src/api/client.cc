// Client::Open (in-process) and Client::Attach (a daemon's socket); see
// include/granary/client.h.
#include "granary/client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>
#include <utility>

#include "api/cache_files.h"
#include "api/direct_files.h"
#include "api/server.h"
#include "api/service.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/units.h"
#include "control/control.h"
#include "control/loader.h"
#include "control/status.h"
#include "control/wire.h"
#include "dataset/dataset.h"

namespace granary {

Client::~Client() = default;

namespace {

using nlohmann::json;

// What both kinds share: path prefix, descriptor cache, reads.
class CachingClient : public Client {
 public:
  CachingClient(std::string prefix, size_t max_open) : prefix_(std::move(prefix)), fds_(max_open) {}

  Result<size_t> ReadAt(std::string_view path, uint64_t offset, std::span<char> out) override {
    ASSIGN_OR_RETURN(std::string rel, Full(path));
    ASSIGN_OR_RETURN(FilePtr f, GetFile(rel));
    if (f->fd >= 0) return PreadAll(f->fd, f->size, offset, out, rel);
    if (offset >= f->size || out.empty()) return size_t{0};
    return ReadThrough(rel, offset, out);
  }

  Result<std::string> ReadWhole(std::string_view path) override {
    std::string buf;
    ASSIGN_OR_RETURN(size_t n, ReadWholeInto(path, [&buf](uint64_t size) {
                       buf.resize(size);
                       return std::span<char>(buf);
                     }));
    buf.resize(n);
    return buf;
  }

  Result<size_t> ReadWholeInto(
      std::string_view path, const std::function<std::span<char>(uint64_t size)>& buffer) override {
    ASSIGN_OR_RETURN(std::string rel, Full(path));
    ASSIGN_OR_RETURN(FilePtr f, GetFile(rel));
    std::span<char> out = buffer(f->size);
    if (out.size() < f->size) {
      return InvalidArgument(rel + ": a buffer of " + std::to_string(out.size()) +
                             " bytes for a file of " + std::to_string(f->size));
    }
    out = out.first(f->size);
    if (f->fd >= 0) return PreadAll(f->fd, f->size, 0, out, rel);
    size_t n = 0;
    while (n < out.size()) {
      ASSIGN_OR_RETURN(size_t k, ReadThrough(rel, n, out.subspan(n)));
      if (k == 0) break;
      n += k;
    }
    return n;
  }

  Result<FileInfo> Stat(std::string_view path) override {
    ASSIGN_OR_RETURN(std::string rel, Full(path));
    ASSIGN_OR_RETURN(FileInfo f, StatFull(rel));
    f.path = Strip(f.path);
    return f;
  }

  Result<std::vector<FileInfo>> List(std::string_view dir, bool recursive) override {
    ASSIGN_OR_RETURN(std::string rel, Full(dir));
    ASSIGN_OR_RETURN(std::vector<FileInfo> v, ListFull(rel, recursive));
    for (FileInfo& f : v) f.path = Strip(f.path);
    return v;
  }

  Status Prefetch(const std::vector<std::string>& paths, size_t window) override {
    std::vector<std::string> full;
    full.reserve(paths.size());
    for (const std::string& p : paths) {
      ASSIGN_OR_RETURN(std::string rel, Full(p));
      full.push_back(std::move(rel));
    }
    return PrefetchFull(full, window);
  }

  Result<LoadResult> Load(std::string_view path) override {
    ASSIGN_OR_RETURN(std::string rel, Full(path));
    return LoadFull(rel);
  }

  Status Refresh() override {
    fds_.Clear();
    return Status::Ok();
  }

 protected:
  // A file this client opens without the daemon, or null (then OpenFull).
  virtual FilePtr OpenDirect(const std::string& rel) { return nullptr; }
  virtual Result<FilePtr> OpenFull(const std::string& rel) = 0;
  virtual Result<size_t> ReadThrough(const std::string& rel, uint64_t offset,
                                     std::span<char> out) = 0;
  virtual Result<FileInfo> StatFull(const std::string& rel) = 0;
  virtual Result<std::vector<FileInfo>> ListFull(const std::string& rel, bool recursive) = 0;
  virtual Status PrefetchFull(const std::vector<std::string>& rel, size_t window) = 0;
  virtual Result<LoadResult> LoadFull(const std::string& rel) = 0;

  Result<std::string> Full(std::string_view path) const {
    ASSIGN_OR_RETURN(std::string rel, NormalizeApiPath(path));
    if (prefix_.empty()) return rel;
    if (rel.empty()) return prefix_;
    return prefix_ + "/" + rel;
  }
  std::string Strip(const std::string& p) const {
    if (prefix_.empty()) return p;
    if (p == prefix_) return "";
    if (p.size() > prefix_.size() && p.starts_with(prefix_) && p[prefix_.size()] == '/')
      return p.substr(prefix_.size() + 1);
    return p;
  }

 private:
  Result<FilePtr> GetFile(const std::string& rel) {
    if (FilePtr f = fds_.Get(rel)) return f;
    if (FilePtr f = OpenDirect(rel)) {
      fds_.Put(rel, f);
      return f;
    }
    ASSIGN_OR_RETURN(FilePtr f, OpenFull(rel));
    if (f->fd >= 0) fds_.Put(rel, f);
    return f;
  }

  std::string prefix_;  // the directory of the dataset the client was pointed at ("" = root)
  FdCache fds_;
};

// ---------------- in-process ----------------

class InProcessClient final : public CachingClient {
 public:
  explicit InProcessClient(std::unique_ptr<Dataset> ds)
      : CachingClient("", FdBound(65536)),
        ds_(std::move(ds)),
        loads_(&ds_->engine()),
        reporter_(&ds_->engine(), &loads_, ""),
        control_(&loads_, &reporter_),
        service_(std::make_unique<ApiService>(&ds_->engine())) {}

  ~InProcessClient() override {
    // Everything that calls into the engine stops before the dataset closes.
    server_.reset();
    service_.reset();
    loads_.Cancel().IgnoreError();
    if (!serve_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(serve_dir_, ec);
    }
    Status s = ds_->Close();
    if (!s.ok()) GLOG_WARN("closing dataset {}: {}", ds_->source(), s.ToString());
  }

  DatasetInfo Info() override { return service_->Info(); }
  PrefetchProgress PrefetchStatus() override { return service_->PrefetchStatus(); }
  Result<std::string> StatusJson() override {
    ASSIGN_OR_RETURN(nlohmann::json st, control_.GetStatus());
    return st.dump();
  }

  Result<std::string> Serve() override {
    MutexLock lock(serve_mu_);
    if (server_) return server_->socket_path();
    std::string tmpl = (std::filesystem::temp_directory_path() / "granary-api-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return IoError("serve: cannot create a directory for the socket: " +
                     std::string(strerror(errno)));
    serve_dir_ = tmpl;
    ASSIGN_OR_RETURN(server_,
                     ApiServer::Start(service_.get(), &control_, serve_dir_ + "/api.sock"));
    return server_->socket_path();
  }

 protected:
  Result<FilePtr> OpenFull(const std::string& rel) override {
    ASSIGN_OR_RETURN(OpenedFile o, service_->Open(rel));
    auto f = std::make_shared<CachedFile>();
    f->fd = o.fd;
    f->size = o.size;
    return f;
  }
  Result<size_t> ReadThrough(const std::string& rel, uint64_t offset,
                             std::span<char> out) override {
    return service_->Read(rel, offset, out);
  }
  Result<FileInfo> StatFull(const std::string& rel) override { return service_->Stat(rel); }
  Result<std::vector<FileInfo>> ListFull(const std::string& rel, bool recursive) override {
    return service_->List(rel, recursive);
  }
  Status PrefetchFull(const std::vector<std::string>& rel, size_t window) override {
    return service_->Prefetch(rel, window);
  }
  Result<LoadResult> LoadFull(const std::string& rel) override {
    ASSIGN_OR_RETURN(std::shared_ptr<LoadJob> job, control_.StartLoad(LoadRequest{.path = rel}));
    return job->Wait();
  }

 private:
  std::unique_ptr<Dataset> ds_;
  LoadManager loads_;
  StatusReporter reporter_;
  LocalControl control_;  // the status and loads of Client::Serve's socket
  std::unique_ptr<ApiService> service_;
  Mutex serve_mu_;  // guards server_, serve_dir_; held while the server starts
  std::string serve_dir_ GUARDED_BY(serve_mu_);
  std::unique_ptr<ApiServer> server_ GUARDED_BY(serve_mu_);
};

// ---------------- attached ----------------

class AttachedClient final : public CachingClient {
 public:
  AttachedClient(std::string socket, std::string prefix, const AttachOptions& o)
      : CachingClient(std::move(prefix), FdBound(o.max_open_files)),
        socket_(std::move(socket)),
        max_conns_(std::max(1, o.connections)),
        direct_wanted_(o.direct) {}

  ~AttachedClient() override {
    {
      MutexLock lock(touch_mu_);
      stop_flusher_ = true;
    }
    touch_cv_.NotifyAll();
    if (flusher_.joinable()) flusher_.join();
    FlushTouches().IgnoreError();
  }

  Status Hello() {
    ASSIGN_OR_RETURN(json r, Call({{"op", "hello"}}));
    if (!r.contains("v") || r["v"] != kApiProtocolVersion)
      return InvalidArgument(socket_ + ": the daemon speaks another api protocol version");
    DatasetInfo info = InfoFrom(r["info"]);
    std::shared_ptr<const DirectFiles> d;
    if (direct_wanted_) {
      NoteTouchBatch(r.value("direct", json()));
      d = DirectFiles::FromHello(r.value("direct", json()));
    }
    MutexLock lock(hello_mu_);
    info_ = std::move(info);
    direct_ = std::move(d);
    return Status::Ok();
  }

  Status Refresh() override {
    RETURN_IF_ERROR(FlushTouches());
    RETURN_IF_ERROR(CachingClient::Refresh());
    return Hello();
  }

  DatasetInfo Info() override {
    if (auto r = Call({{"op", "hello"}}); r.ok()) return InfoFrom((*r)["info"]);
    MutexLock lock(hello_mu_);
    return info_;
  }

  PrefetchProgress PrefetchStatus() override {
    FlushTouches().IgnoreError();
    PrefetchProgress p;
    auto r = Call({{"op", "prefetch_status"}});
    if (!r.ok()) return p;
    const json& j = (*r)["progress"];
    p.queued = j.value("queued", uint64_t{0});
    p.fetched = j.value("fetched", uint64_t{0});
    p.skipped = j.value("skipped", uint64_t{0});
    p.failed = j.value("failed", uint64_t{0});
    p.position = j.value("position", uint64_t{0});
    return p;
  }

  Result<std::string> StatusJson() override {
    ASSIGN_OR_RETURN(json r, Call({{"op", "status"}}));
    return r["status"].dump();
  }

  Result<std::string> Serve() override {
    return Unimplemented("serve: an attached client cannot serve (attach to " + socket_ +
                         " instead)");
  }

 protected:
  Result<FilePtr> OpenFull(const std::string& rel) override {
    auto f = std::make_shared<CachedFile>();
    int fd = -1;
    ASSIGN_OR_RETURN(json r, Call({{"op", "open"}, {"path", rel}}, &fd));
    f->fd = fd;
    f->size = r.value("size", uint64_t{0});
    if (r.value("fd", false) && fd < 0)
      return IoError(socket_ + ": open reply carried no descriptor");
    return f;
  }

  Result<size_t> ReadThrough(const std::string& rel, uint64_t offset,
                             std::span<char> out) override {
    size_t done = 0;
    while (done < out.size()) {
      size_t len = std::min<size_t>(out.size() - done, 32u << 20);
      ASSIGN_OR_RETURN(size_t n, CallRead(rel, offset + done, out.subspan(done, len)));
      if (n == 0) break;
      done += n;
    }
    return done;
  }

  FilePtr OpenDirect(const std::string& rel) override {
    std::shared_ptr<const DirectFiles> d = Direct();
    if (!d) return nullptr;
    uint64_t ino = 0;
    FilePtr f = d->Open(rel, &ino);
    if (f) NoteTouch(d->version(), ino);
    return f;
  }

  Result<FileInfo> StatFull(const std::string& rel) override {
    ASSIGN_OR_RETURN(json r, Call({{"op", "stat"}, {"path", rel}}));
    return EntryFrom(r["entry"]);
  }

  Result<std::vector<FileInfo>> ListFull(const std::string& rel, bool recursive) override {
    ASSIGN_OR_RETURN(json r, Call({{"op", "list"}, {"path", rel}, {"recursive", recursive}}));
    std::vector<FileInfo> out;
    out.reserve(r["entries"].size());
    for (const json& e : r["entries"]) out.push_back(EntryFrom(e));
    return out;
  }

  Status PrefetchFull(const std::vector<std::string>& rel, size_t window) override {
    FlushTouches().IgnoreError();  // reads of the previous order
    ASSIGN_OR_RETURN(json r, Call({{"op", "prefetch"}, {"paths", rel}, {"window", window}}));
    NoteTouchBatch(r);
    return Status::Ok();
  }

  Result<LoadResult> LoadFull(const std::string& rel) override {
    ASSIGN_OR_RETURN(json r, Call({{"op", "load"}, {"path", rel}}));
    try {
      return LoadResultFromJson(r.value("load", json::object()));
    } catch (const json::exception& e) {
      return Broken(socket_, IoError(std::string("malformed load reply: ") + e.what()));
    }
  }

 private:
  static FileInfo EntryFrom(const json& e) {
    FileInfo f;
    if (e.is_array() && e.size() == 4) {
      f.path = e[0].get<std::string>();
      f.is_dir = e[1].get<bool>();
      f.size = e[2].get<uint64_t>();
      f.mtime_ns = e[3].get<int64_t>();
    }
    return f;
  }
  static DatasetInfo InfoFrom(const json& j) {
    DatasetInfo i;
    if (!j.is_object()) return i;
    i.source = j.value("source", std::string());
    i.files = j.value("files", uint64_t{0});
    i.bytes = j.value("bytes", uint64_t{0});
    i.snapshot_version = j.value("version", uint64_t{0});
    i.attached = true;
    return i;
  }

  // A connection from the pool (new up to max_conns_, else waits).
  Result<std::unique_ptr<WireConn>> Take() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(lock, [&]() REQUIRES(mu_) { return !idle_.empty() || open_ < max_conns_; });
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    ++open_;
    lock.Unlock();
    Result<int> fd = ConnectUnix(socket_);
    if (!fd.ok()) {
      Give(nullptr);
      return fd.status();
    }
    return std::make_unique<WireConn>(*fd);
  }
  // Returns a connection to the pool (null: it broke).
  void Give(std::unique_ptr<WireConn> c) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (c) {
        idle_.push_back(std::move(c));
      } else {
        --open_;
      }
    }
    cv_.NotifyOne();
  }

  static Status Broken(const std::string& socket, const Status& s) {
    return Unavailable("granary daemon at " + socket + ": " + s.message());
  }

  Result<json> Call(const json& req, int* fd_out = nullptr) {
    ASSIGN_OR_RETURN(std::unique_ptr<WireConn> c, Take());
    Status s = c->Send(req);
    Result<std::string> line = s.ok() ? c->ReadLine(size_t{1} << 31) : Result<std::string>(s);
    if (!line.ok()) {
      Give(nullptr);
      return Broken(socket_, line.status());
    }
    json r = json::parse(*line, nullptr, false);
    int fd = c->TakeFd();
    for (int extra = c->TakeFd(); extra >= 0; extra = c->TakeFd()) ::close(extra);
    Give(std::move(c));
    Status st = StatusFromReply(r);
    if (!st.ok()) {
      if (fd >= 0) ::close(fd);
      return st;
    }
    if (fd_out) {
      *fd_out = fd;
    } else if (fd >= 0) {
      ::close(fd);
    }
    return r;
  }

  Result<size_t> CallRead(const std::string& rel, uint64_t offset, std::span<char> out) {
    ASSIGN_OR_RETURN(std::unique_ptr<WireConn> c, Take());
    Status s = c->Send({{"op", "read"}, {"path", rel}, {"offset", offset}, {"length", out.size()}});
    Result<std::string> line = s.ok() ? c->ReadLine(1 << 20) : Result<std::string>(s);
    if (!line.ok()) {
      Give(nullptr);
      return Broken(socket_, line.status());
    }
    json r = json::parse(*line, nullptr, false);
    Status st = StatusFromReply(r);
    if (!st.ok()) {
      Give(std::move(c));
      return st;
    }
    size_t n = r.value("n", size_t{0});
    if (n > out.size()) {
      Give(nullptr);
      return IoError(socket_ + ": read reply longer than asked");
    }
    Status got = c->ReadExact(out.first(n));
    if (!got.ok()) {
      Give(nullptr);
      return Broken(socket_, got);
    }
    Give(std::move(c));
    return n;
  }

  std::shared_ptr<const DirectFiles> Direct() EXCLUDES(hello_mu_) {
    MutexLock lock(hello_mu_);
    return direct_;
  }

  // Reads of files opened without the daemon, told to it in batches (the
  // `touch` op) of the size it asks for: it keeps them recently used and
  // moves the prefetcher.
  static constexpr std::chrono::milliseconds kTouchDelay{50};
  static constexpr size_t kMaxPendingTouches = 16384;

  void NoteTouchBatch(const json& reply) {
    if (!reply.is_object()) return;
    const uint64_t n = reply.value("touch_batch", uint64_t{Prefetcher::kTouchBatch});
    touch_batch_.store(std::clamp<uint64_t>(n, 1, 4096), std::memory_order_relaxed);
  }

  // A reader only queues its touch: the flusher thread sends the batch, so
  // no read waits for a round trip to the daemon.
  void NoteTouch(uint64_t version, uint64_t ino) EXCLUDES(touch_mu_) {
    const Clock::TimePoint now = Clock::Real()->Now();
    MutexLock lock(touch_mu_);
    // Reads of an older version would be ignored by the daemon anyway.
    if (touches_.empty() || touch_version_ != version) {
      touches_.clear();
      touch_version_ = version;
      first_touch_ = now;
    }
    // Hints only: past kMaxPendingTouches (a daemon that answers slowly)
    // further ones are dropped rather than held.
    if (touches_.size() < kMaxPendingTouches) touches_.push_back(ino);
    if (!flusher_.joinable()) {
      flusher_ = std::thread([this] { FlushLoop(); });
    } else if (touches_.size() == 1 || BatchFull()) {
      touch_cv_.NotifyOne();
    }
  }

  bool BatchFull() const REQUIRES(touch_mu_) {
    return touches_.size() >= touch_batch_.load(std::memory_order_relaxed);
  }

  // The flusher thread (started by the first read without the daemon): sends
  // a batch once it is full, or kTouchDelay after its first touch, so the
  // last reads of an epoch reach the daemon too.
  void FlushLoop() EXCLUDES(touch_mu_) {
    MutexLock lock(touch_mu_);
    while (!stop_flusher_) {
      if (touches_.empty()) {
        touch_cv_.Wait(lock,
                       [&]() REQUIRES(touch_mu_) { return stop_flusher_ || !touches_.empty(); });
        continue;
      }
      const auto due = first_touch_ + kTouchDelay;
      const auto now = Clock::Real()->Now();
      if (now < due && !BatchFull()) {
        touch_cv_.WaitFor(lock, due - now);
        continue;
      }
      lock.Unlock();
      FlushTouchesOrLog();
      lock.Lock();
    }
  }

  // FlushTouches from a reader or the flusher: a failure loses one batch of
  // hints (recency, the prefetcher's position), never a read.
  void FlushTouchesOrLog() EXCLUDES(touch_mu_) {
    Status s = FlushTouches();
    if (!s.ok()) GLOG_DEBUG("attach: telling the daemon about reads: {}", s.ToString());
  }

  // Sends the pending touches; when the daemon serves another snapshot
  // version now, maps it (new opens resolve against it).
  Status FlushTouches() EXCLUDES(touch_mu_) {
    std::vector<uint64_t> inos;
    uint64_t version = 0;
    {
      MutexLock lock(touch_mu_);
      inos.swap(touches_);
      version = touch_version_;
    }
    if (inos.empty()) return Status::Ok();
    ASSIGN_OR_RETURN(json r, Call({{"op", "touch"}, {"version", version}, {"inos", inos}}));
    NoteTouchBatch(r);
    if (r.value("version", version) != version) return Hello();
    return Status::Ok();
  }

  std::string socket_;
  int max_conns_;
  const bool direct_wanted_;
  std::atomic<uint64_t> touch_batch_{Prefetcher::kTouchBatch};
  // Guards what the last hello said (a touch reply naming a new snapshot
  // version asks again, from any thread); a leaf lock.
  Mutex hello_mu_;
  DatasetInfo info_ GUARDED_BY(hello_mu_);
  std::shared_ptr<const DirectFiles> direct_ GUARDED_BY(hello_mu_);
  Mutex touch_mu_;    // guards the pending touches and the flusher; a leaf lock
  CondVar touch_cv_;  // a first touch pending, or stop
  std::vector<uint64_t> touches_ GUARDED_BY(touch_mu_);
  uint64_t touch_version_ GUARDED_BY(touch_mu_) = 0;
  Clock::TimePoint first_touch_ GUARDED_BY(touch_mu_){};
  bool stop_flusher_ GUARDED_BY(touch_mu_) = false;
  // Started under touch_mu_ by the first touch; joined by the destructor.
  std::thread flusher_;
  Mutex mu_;    // guards idle_, open_; a leaf lock
  CondVar cv_;  // signalled when a connection is returned or breaks
  std::vector<std::unique_ptr<WireConn>> idle_ GUARDED_BY(mu_);
  int open_ GUARDED_BY(mu_) = 0;  // connections made and not broken (idle or in use)
};

bool IsSocket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Open(const std::string& source, const OpenOptions& o) {
  if (source.empty()) return InvalidArgument("open: the source is empty");
  DatasetOptions d;
  d.source = source;
  d.ufs.options = o.origin_options;
  d.ufs.secrets = o.origin_secrets;
  if (!o.cache_dirs.empty()) {
    d.cache_dirs.clear();
    for (const std::string& text : o.cache_dirs) {
      ASSIGN_OR_RETURN(TierLevel t, ParseCacheDirSpec(text, "cache dir"));
      d.cache_dirs.push_back(std::move(t));
    }
  }
  if (!o.cache_size.empty()) {
    ASSIGN_OR_RETURN(d.default_cache_size, ParseSize(o.cache_size));
    if (d.default_cache_size == 0) return InvalidArgument("cache_size: must be > 0");
  }
  if (!o.mem_cache.empty()) {
    ASSIGN_OR_RETURN(d.mem_cache, ParseSize(o.mem_cache));
  }
  if (o.origin_concurrency < 0) return InvalidArgument("origin_concurrency: must be >= 0");
  if (o.origin_concurrency > 0) d.engine.origin_concurrency = o.origin_concurrency;
  if (o.origin_timeout.count() <= 0) return InvalidArgument("origin_timeout: must be > 0");
  d.engine.origin_timeout = o.origin_timeout;
  d.policy = o.policy;
  ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, Dataset::Open(std::move(d)));
  return std::unique_ptr<Client>(new InProcessClient(std::move(ds)));
}

Result<std::unique_ptr<Client>> Client::Attach(const std::string& target, const AttachOptions& o) {
  if (target.empty()) return InvalidArgument("attach: the target is empty");
  if (o.connections < 1) return InvalidArgument("attach: connections must be >= 1");
  std::string socket;
  std::string prefix;
  if (IsSocket(target)) {
    socket = target;
  } else {
    Result<MountLocation> loc = FindGranaryMount(target);
    if (!loc.ok()) {
      std::error_code ec;
      if (!std::filesystem::exists(target, ec))
        return NotFound("attach: " + target + ": no such mount point or socket");
      return loc.status().WithContext("attach");
    }
    std::string run_dir = o.run_dir;
    if (run_dir.empty()) {
      const char* env = std::getenv("GRANARY_RUN_DIR");
      run_dir = env != nullptr && *env != '\0' ? env : "/run/granary";
    }
    socket = DaemonSocketPath(run_dir, loc->mountpoint);
    prefix = loc->subdir;
    if (!IsSocket(socket))
      return NotFound("attach: no daemon socket of " + loc->mountpoint + " at " + socket +
                      " (another --run-dir, or GRANARY_RUN_DIR?)");
  }
  auto c = std::make_unique<AttachedClient>(socket, prefix, o);
  RETURN_IF_ERROR(c->Hello());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace granary
