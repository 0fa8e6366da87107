// Client::Open (in-process) and Client::Attach (a daemon's socket); see
// include/granary/client.h.
#include "granary/client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <list>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "api/server.h"
#include "api/service.h"
#include "api/wire.h"
#include "common/clock.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/units.h"
#include "control/control.h"
#include "control/loader.h"
#include "control/status.h"
#include "dataset/dataset.h"
#include "meta/snapshot.h"
#include "store/store.h"

namespace granary {

Client::~Client() = default;

namespace {

using nlohmann::json;

// An open cache file (or, fd -1, a file read through the engine/daemon).
struct CachedFile {
  int fd = -1;
  uint64_t size = 0;
  ~CachedFile() {
    if (fd >= 0) ::close(fd);
  }
};
using FilePtr = std::shared_ptr<CachedFile>;

// Descriptors by path, least recently used closed first.
class FdCache {
 public:
  explicit FdCache(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}
  FilePtr Get(const std::string& path) {
    MutexLock lock(mu_);
    auto it = map_.find(path);
    if (it == map_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  void Put(const std::string& path, FilePtr f) {
    FilePtr evicted;  // closed after the lock is released
    MutexLock lock(mu_);
    auto it = map_.find(path);
    if (it != map_.end()) {
      evicted = std::exchange(it->second.first, std::move(f));
      lru_.splice(lru_.begin(), lru_, it->second.second);
      lock.Unlock();
      return;
    }
    lru_.push_front(path);
    map_.emplace(path, std::make_pair(std::move(f), lru_.begin()));
    if (map_.size() > capacity_) {
      auto last = map_.find(lru_.back());
      evicted = std::move(last->second.first);
      map_.erase(last);
      lru_.pop_back();
    }
    lock.Unlock();
  }
  void Clear() {
    MutexLock lock(mu_);
    map_.clear();
    lru_.clear();
  }

 private:
  size_t capacity_;
  Mutex mu_;  // guards map_, lru_; a leaf lock
  std::list<std::string> lru_ GUARDED_BY(mu_);
  std::unordered_map<std::string, std::pair<FilePtr, std::list<std::string>::iterator>> map_
      GUARDED_BY(mu_);
};

// How many cache-file descriptors a client may keep: `wanted`, at most half
// of the file limit, whose soft value is raised to the hard one first.
size_t FdBound(size_t wanted) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return std::min<size_t>(wanted, 512);
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const size_t half = rl.rlim_cur == RLIM_INFINITY ? wanted : static_cast<size_t>(rl.rlim_cur / 2);
  return std::max<size_t>(16, std::min(wanted, half));
}

Result<size_t> PreadAll(int fd, uint64_t size, uint64_t offset, std::span<char> out,
                        const std::string& path) {
  if (offset >= size || out.empty()) return size_t{0};
  size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), size - offset));
  size_t done = 0;
  while (done < want) {
    ssize_t n = ::pread(fd, out.data() + done, want - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(path + ": read of the cache file: " + strerror(errno));
    }
    if (n == 0) return Corruption(path + ": cache file shorter than the object");
    done += static_cast<size_t>(n);
  }
  return done;
}

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

  Result<LoadSummary> Load(std::string_view path) override {
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
  virtual Result<LoadSummary> LoadFull(const std::string& rel) = 0;

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
        service_(std::make_unique<ApiService>(
            &ds_->engine(),
            [this](std::string_view path) -> Result<LoadSummary> {
              ASSIGN_OR_RETURN(auto job, loads_.Start(LoadRequest{.path = std::string(path)}));
              return SummarizeLoad(job->Wait());
            },
            [this]() -> Result<std::string> { return StatusToJson(reporter_.Compute()).dump(); })) {
  }

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
  Result<std::string> StatusJson() override { return service_->StatusJson(); }

  Result<std::string> Serve() override {
    MutexLock lock(serve_mu_);
    if (server_) return server_->socket_path();
    std::string tmpl = (std::filesystem::temp_directory_path() / "granary-api-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return IoError("serve: cannot create a directory for the socket: " +
                     std::string(strerror(errno)));
    serve_dir_ = tmpl;
    ASSIGN_OR_RETURN(server_, ApiServer::Start(service_.get(), serve_dir_ + "/api.sock"));
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
  Result<LoadSummary> LoadFull(const std::string& rel) override { return service_->Load(rel); }

 private:
  std::unique_ptr<Dataset> ds_;
  LoadManager loads_;
  StatusReporter reporter_;
  std::unique_ptr<ApiService> service_;
  Mutex serve_mu_;  // guards server_, serve_dir_; held while the server starts
  std::string serve_dir_ GUARDED_BY(serve_mu_);
  std::unique_ptr<ApiServer> server_ GUARDED_BY(serve_mu_);
};

// ---------------- attached ----------------

// Opens complete small cache files the way the daemon would hand them out,
// without asking it (docs/api.md, "Reads without the daemon"): resolves the
// path in the daemon's snapshot file, mapped read-only here, and opens the
// object's cache file by the store's layout, trusting it only under the
// store's rule (Store::FileLayout): a small object, the right size, changed
// since the store opened. Anything else is left to the daemon.
class DirectFiles {
 public:
  // From hello's "direct" object; null when it is absent or the snapshot
  // cannot be mapped here (another user's files, a removed file).
  static std::unique_ptr<DirectFiles> FromHello(const json& j) {
    if (!j.is_object()) return nullptr;
    JsonFields in(j, "hello: direct");
    std::string snapshot_path;
    auto d = std::unique_ptr<DirectFiles>(new DirectFiles());
    in.Require("snapshot", snapshot_path);
    in.Require("dataset", d->dataset_);
    in.Require("block_size", d->block_size_);
    in.Require("tiers", d->tiers_);
    in.Require("trusted_since_ns", d->trusted_since_ns_);
    if (!in.status().ok() || d->tiers_.empty() || d->block_size_ == 0) return nullptr;
    Result<std::unique_ptr<Snapshot>> snap = Snapshot::Load(snapshot_path);
    if (!snap.ok()) {
      GLOG_DEBUG("attach: reading without the daemon is off: {}", snap.status().ToString());
      return nullptr;
    }
    d->snap_ = std::move(*snap);
    // The fan-out directories, opened once: a file is then one openat of its
    // name (a directory this user may not open just is not used).
    d->subdirs_.assign(d->tiers_.size() * 256, -1);
    for (size_t t = 0; t < d->tiers_.size(); ++t) {
      for (int sub = 0; sub < 256; ++sub) {
        char name[4];
        std::snprintf(name, sizeof(name), "%02x", sub);
        d->subdirs_[t * 256 + static_cast<size_t>(sub)] =
            ::open((d->tiers_[t] + "/" + name).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      }
    }
    return d;
  }

  uint64_t version() const { return snap_->version(); }

  // The entry of `rel` in this snapshot (null when it has none).
  std::optional<EntryView> Find(const std::string& rel) const {
    auto ino = snap_->FindPath(rel);
    return ino ? snap_->Get(*ino) : std::nullopt;
  }

  DirectFiles(const DirectFiles&) = delete;
  DirectFiles& operator=(const DirectFiles&) = delete;
  ~DirectFiles() {
    for (int fd : subdirs_)
      if (fd >= 0) ::close(fd);
  }

  // The open cache file of `rel` and its inode, or a null file.
  FilePtr Open(const std::string& rel, uint64_t* ino) const {
    std::optional<EntryView> e = Find(rel);
    if (!e || e->is_dir || e->size == 0 || e->size > block_size_) return nullptr;
    const std::string name = CacheFileName(ObjectKey{.dataset = dataset_,
                                                     .key = snap_->Key(e->ino),
                                                     .etag = std::string(e->etag),
                                                     .size = e->size});
    const int sub = std::stoi(name.substr(0, 2), nullptr, 16);
    for (size_t tier = 0; tier < tiers_.size(); ++tier) {
      const int dir = subdirs_[tier * 256 + static_cast<size_t>(sub)];
      if (dir < 0) continue;
      int fd = ::openat(dir, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) continue;
      struct stat st {};
      const bool trusted =
          ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
          static_cast<uint64_t>(st.st_size) == e->size &&
          int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec >= trusted_since_ns_;
      if (!trusted) {
        ::close(fd);
        continue;
      }
      auto f = std::make_shared<CachedFile>();
      f->fd = fd;
      f->size = e->size;
      *ino = e->ino;
      return f;
    }
    return nullptr;
  }

 private:
  DirectFiles() = default;
  std::unique_ptr<Snapshot> snap_;
  std::string dataset_;
  uint64_t block_size_ = 0;
  std::vector<std::string> tiers_;
  int64_t trusted_since_ns_ = 0;
  std::vector<int> subdirs_;  // O_PATH descriptors: tier t, fan-out s at t * 256 + s
};

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

  Result<LoadSummary> LoadFull(const std::string& rel) override {
    ASSIGN_OR_RETURN(json r, Call({{"op", "load"}, {"path", rel}}));
    const json& j = r["load"];
    return LoadSummary{.files_requested = j.value("files_requested", uint64_t{0}),
                       .bytes_requested = j.value("bytes_requested", uint64_t{0}),
                       .files_cached = j.value("files_cached", uint64_t{0}),
                       .bytes_cached = j.value("bytes_cached", uint64_t{0}),
                       .files_failed = j.value("files_failed", uint64_t{0}),
                       .files_not_fitted = j.value("files_not_fitted", uint64_t{0}),
                       .missing = j.value("missing", uint64_t{0}),
                       .elapsed_s = j.value("elapsed_s", 0.0)};
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

  void NoteTouchBatch(const json& reply) {
    if (!reply.is_object()) return;
    const uint64_t n = reply.value("touch_batch", uint64_t{Prefetcher::kTouchBatch});
    touch_batch_.store(std::clamp<uint64_t>(n, 1, 4096), std::memory_order_relaxed);
  }

  void NoteTouch(uint64_t version, uint64_t ino) EXCLUDES(touch_mu_) {
    const Clock::TimePoint now = Clock::Real()->Now();
    bool full = false;
    {
      MutexLock lock(touch_mu_);
      // Reads of an older version would be ignored by the daemon anyway.
      if (touches_.empty() || touch_version_ != version) {
        touches_.clear();
        touch_version_ = version;
        first_touch_ = now;
      }
      touches_.push_back(ino);
      full = touches_.size() >= touch_batch_.load(std::memory_order_relaxed);
      if (!flusher_.joinable()) {
        flusher_ = std::thread([this] { FlushLoop(); });
      } else if (touches_.size() == 1) {
        touch_cv_.NotifyOne();
      }
    }
    if (full) {
      Status s = FlushTouches();
      if (!s.ok()) GLOG_DEBUG("attach: telling the daemon about reads: {}", s.ToString());
    }
  }

  // The flusher thread (started by the first read without the daemon): sends
  // touches kTouchDelay after the first of a batch, so the last reads of an
  // epoch reach the daemon too.
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
      if (now < due) {
        touch_cv_.WaitFor(lock, due - now);
        continue;
      }
      lock.Unlock();
      Status s = FlushTouches();
      if (!s.ok()) GLOG_DEBUG("attach: telling the daemon about reads: {}", s.ToString());
      lock.Lock();
    }
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
    socket = ApiSocketPathFor(ControlSocketPath(run_dir, loc->mountpoint));
    prefix = loc->subdir;
    if (!IsSocket(socket))
      return NotFound("attach: the daemon of " + loc->mountpoint + " serves no api socket at " +
                      socket + " (an older granary, or another --run-dir)");
  }
  auto c = std::make_unique<AttachedClient>(socket, prefix, o);
  RETURN_IF_ERROR(c->Hello());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace granary
