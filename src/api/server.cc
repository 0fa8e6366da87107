// ApiServer (see server.h).
#include "api/server.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/clock.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "control/control.h"
#include "control/wire.h"

namespace granary {

using nlohmann::json;

namespace {

constexpr size_t kMaxRequestBytes = 256u << 20;  // a prefetch order of ~2M paths
constexpr uint64_t kMaxReadBytes = 64u << 20;

json EntryJson(const FileInfo& f) { return json::array({f.path, f.is_dir, f.size, f.mtime_ns}); }

}  // namespace

struct ApiServer::Conn {
  explicit Conn(int fd) : wire(fd) {}
  WireConn wire;
  std::thread thread;
  std::atomic<bool> done{false};
};

Result<std::unique_ptr<ApiServer>> ApiServer::Start(ApiService* service, ControlHandler* control,
                                                    std::string socket_path, int max_connections) {
  if (socket_path.empty()) return InvalidArgument("daemon socket: empty path");
  Result<sockaddr_un> address = UnixAddress(socket_path);
  if (!address.ok()) return address.status().WithContext("daemon socket");
  std::filesystem::path dir = std::filesystem::path(socket_path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return IoError("daemon socket: cannot create " + dir.string() + ": " + ec.message());
    ::chmod(dir.c_str(), 0700);
  }
  if (Result<int> live = ConnectUnix(socket_path); live.ok()) {
    ::close(*live);
    return InvalidArgument("daemon socket " + socket_path + ": another process serves it");
  }
  ::unlink(socket_path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(std::string("daemon socket: ") + strerror(errno));
  mode_t old = ::umask(0177);
  int rc = ::bind(fd, reinterpret_cast<const struct sockaddr*>(&*address), sizeof(sockaddr_un));
  ::umask(old);
  if (rc != 0 || ::listen(fd, 256) != 0) {
    int e = errno;
    ::close(fd);
    return IoError("daemon socket: bind " + socket_path + ": " + strerror(e));
  }
  ::chmod(socket_path.c_str(), 0600);
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return IoError(std::string("daemon socket: eventfd: ") + strerror(errno));
  }
  auto s = std::unique_ptr<ApiServer>(
      new ApiServer(service, control, std::move(socket_path), fd, wake, max_connections));
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

ApiServer::ApiServer(ApiService* service, ControlHandler* control, std::string path, int listen_fd,
                     int wake_fd, int max_connections)
    : service_(service),
      control_(control),
      path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      max_connections_(max_connections) {}

ApiServer::~ApiServer() {
  stopping_ = true;
  uint64_t one = 1;
  ssize_t wrote = ::write(wake_fd_, &one, sizeof one);
  (void)wrote;
  accept_thread_.join();
  {
    MutexLock lock(conns_mu_);
    for (auto& c : conns_) ::shutdown(c->wire.fd(), SHUT_RDWR);
  }
  for (auto& c : conns_) c->thread.join();
  conns_.clear();
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(path_.c_str());
}

void ApiServer::AcceptLoop() {
  for (;;) {
    struct pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int n = ::poll(p, 2, -1);
    if (stopping_) return;
    if (n < 0) continue;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    MutexLock lock(conns_mu_);
    // Reap finished connections.
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done) {
        (*it)->thread.join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    if (static_cast<int>(conns_.size()) >= max_connections_) {
      WireConn refused(fd);
      refused
          .Send(ErrorJson(
              Unavailable("too many api connections (" + std::to_string(max_connections_) + ")")))
          .IgnoreError();
      continue;
    }
    conns_.push_back(std::make_unique<Conn>(fd));
    Conn* c = conns_.back().get();
    c->thread = std::thread([this, c] { Serve(c); });
  }
}

void ApiServer::Serve(Conn* c) {
  WireConn& w = c->wire;
  for (;;) {
    Result<std::string> line = w.ReadLine(kMaxRequestBytes);
    if (!line.ok()) {
      if (line.status().code() == Code::kInvalidArgument)
        w.Send(ErrorJson(line.status())).IgnoreError();
      break;
    }
    if (line->empty()) continue;
    if (!Answer(w, json::parse(*line, nullptr, /*allow_exceptions=*/false)).ok()) break;
  }
  c->done = true;
}

Status ApiServer::Answer(WireConn& w, const json& req) {
  JsonFields in(req, "bad request fields");
  std::string op;
  in.Require("op", op);
  if (!in.status().ok()) {
    return w.Send(ErrorJson(
        InvalidArgument("malformed request: a JSON object whose \"op\" must be a string")));
  }
  std::string path;
  in.Get("path", path);
  if (op == "hello") return Hello(w);
  if (op == "stat") return StatOp(w, in, path);
  if (op == "list") return ListOp(w, in, path);
  if (op == "open") return OpenOp(w, in, path);
  if (op == "read") return ReadOp(w, in, path);
  if (op == "prefetch") return PrefetchOp(w, in);
  if (op == "prefetch_status") return PrefetchStatusOp(w);
  if (op == "touch") return TouchOp(w, in);
  if (IsControlOp(op)) return AnswerControl(w, req);
  return w.Send(ErrorJson(InvalidArgument(
      "unknown op '" + op +
      "' (expected hello, stat, list, open, read, prefetch, prefetch_status, touch, status, "
      "cluster_status, load, cancel, sync or drain)")));
}

Status ApiServer::Hello(WireConn& w) {
  DatasetInfo i = service_->Info();
  DirectLayout d = service_->Direct();
  return w.Send({{"ok", true},
                 {"v", kApiProtocolVersion},
                 {"info",
                  {{"source", i.source},
                   {"files", i.files},
                   {"bytes", i.bytes},
                   {"version", i.snapshot_version}}},
                 {"direct",
                  {{"snapshot", d.snapshot_path},
                   {"version", d.version},
                   {"dataset", d.dataset},
                   {"block_size", d.files.block_size},
                   {"tiers", d.files.tier_paths},
                   {"trusted_since_ns", d.files.trusted_since_ns},
                   {"touch_batch", service_->TouchBatch()}}}});
}

Status ApiServer::TouchOp(WireConn& w, JsonFields& in) {
  uint64_t version = 0;
  std::vector<uint64_t> inos;
  in.Require("version", version);
  in.Require("inos", inos);
  if (!in.status().ok()) return w.Send(ErrorJson(in.status()));
  const uint64_t now = service_->NoteDirectReads(version, inos);
  return w.Send({{"ok", true}, {"version", now}, {"touch_batch", service_->TouchBatch()}});
}

Status ApiServer::StatOp(WireConn& w, const JsonFields& in, const std::string& path) {
  if (!in.status().ok()) return w.Send(ErrorJson(in.status()));
  auto r = service_->Stat(path);
  return r.ok() ? w.Send({{"ok", true}, {"entry", EntryJson(*r)}}) : w.Send(ErrorJson(r.status()));
}

Status ApiServer::ListOp(WireConn& w, JsonFields& in, const std::string& path) {
  bool recursive = false;
  in.Get("recursive", recursive);
  if (!in.status().ok()) return w.Send(ErrorJson(in.status()));
  auto r = service_->List(path, recursive);
  if (!r.ok()) return w.Send(ErrorJson(r.status()));
  json entries = json::array();
  for (const FileInfo& f : *r) entries.push_back(EntryJson(f));
  return w.Send({{"ok", true}, {"entries", std::move(entries)}});
}

Status ApiServer::OpenOp(WireConn& w, const JsonFields& in, const std::string& path) {
  if (!in.status().ok()) return w.Send(ErrorJson(in.status()));
  auto r = service_->Open(path);
  if (!r.ok()) return w.Send(ErrorJson(r.status()));
  json reply = {{"ok", true},
                {"fd", r->fd >= 0},
                {"size", r->size},
                {"ino", r->ino},
                {"version", r->version}};
  Status sent = w.Send(reply, r->fd);
  if (r->fd >= 0) ::close(r->fd);
  return sent;
}

Status ApiServer::ReadOp(WireConn& w, JsonFields& in, const std::string& path) {
  uint64_t offset = 0, length = 0;
  in.Get("offset", offset);
  in.Get("length", length);
  if (!in.status().ok()) return w.Send(ErrorJson(in.status()));
  if (length > kMaxReadBytes) {
    return w.Send(ErrorJson(InvalidArgument("read: length " + std::to_string(length) +
                                            " is over the limit of 64 MiB")));
  }
  std::string buf(length, '\0');
  auto r = service_->Read(path, offset, std::span<char>(buf.data(), buf.size()));
  return r.ok() ? w.Send({{"ok", true}, {"n", *r}}, -1, std::span<const char>(buf.data(), *r))
                : w.Send(ErrorJson(r.status()));
}

Status ApiServer::PrefetchOp(WireConn& w, JsonFields& in) {
  std::vector<std::string> paths;
  size_t window = 256;
  in.Get("paths", paths);
  in.Get("window", window);
  if (!in.status().ok()) return w.Send(ErrorJson(in.status()));
  Status s = service_->Prefetch(paths, window);
  return w.Send(s.ok() ? json{{"ok", true}, {"touch_batch", service_->TouchBatch()}}
                       : ErrorJson(s));
}

Status ApiServer::PrefetchStatusOp(WireConn& w) {
  PrefetchProgress p = service_->PrefetchStatus();
  return w.Send({{"ok", true},
                 {"progress",
                  {{"queued", p.queued},
                   {"fetched", p.fetched},
                   {"skipped", p.skipped},
                   {"failed", p.failed},
                   {"position", p.position}}}});
}

Status ApiServer::AnswerControl(WireConn& w, const json& req) {
  Result<ControlRequest> r = ControlRequestFromJson(req);
  if (!r.ok()) return w.Send(ErrorJson(r.status()));
  if (control_ == nullptr) {
    return w.Send(ErrorJson(Unimplemented("this socket serves no control ops")));
  }
  // One reply: `key` holding what the handler returned, or its error.
  auto reply = [&w](const char* key, const Result<json>& got) {
    if (!got.ok()) return w.Send(ErrorJson(got.status()));
    return w.Send({{"ok", true}, {key, *got}});
  };
  switch (r->op) {
    case ControlOp::kStatus: return reply("status", control_->GetStatus());
    case ControlOp::kClusterStatus: return reply("cluster", control_->GetClusterStatus());
    case ControlOp::kSync: return reply("sync", control_->Sync());
    case ControlOp::kDrain: return reply("drain", control_->Drain());
    case ControlOp::kLoad: return LoadOp(w, *r);
    case ControlOp::kCancel: {
      Status s = control_->CancelLoad();
      return w.Send(s.ok() ? json{{"ok", true}} : ErrorJson(s));
    }
  }
  return w.Send(ErrorJson(Internal("unhandled control op")));
}

Status ApiServer::LoadOp(WireConn& w, const ControlRequest& req) {
  LoadRequest request = req.load;
  if (!req.list_file.empty()) {
    if (Status s = ReadLoadListFile(req.list_file, request); !s.ok()) {
      return w.Send(ErrorJson(s));
    }
  }
  Result<std::shared_ptr<LoadJob>> started = control_->StartLoad(request);
  if (!started.ok()) return w.Send(ErrorJson(started.status()));
  LoadJob& job = **started;
  if (req.background) {
    return w.Send(
        {{"ok", true}, {"started", true}, {"progress", LoadProgressToJson(job.progress())}});
  }
  // During a load the client sends nothing but "cancel"; the end of the
  // connection (Ctrl-C) cancels it too.
  bool client_here = true;
  auto next_progress = Clock::Real()->Now() + kProgressInterval;
  while (!job.WaitFor(std::chrono::milliseconds(client_here ? 0 : 50))) {
    if (stopping_) job.Cancel();
    if (!client_here) continue;
    Result<bool> got = w.Poll(50);
    if (!got.ok()) {
      client_here = false;
      job.Cancel();
      continue;
    }
    if (*got) {
      if (w.Unread().find("cancel") != std::string_view::npos) job.Cancel();
      w.DropUnread();
    }
    if (!req.progress || Clock::Real()->Now() < next_progress) continue;
    next_progress += kProgressInterval;
    if (!w.Send({{"ok", true}, {"progress", LoadProgressToJson(job.progress())}}).ok()) {
      client_here = false;
      job.Cancel();
    }
  }
  LoadResult result = job.Wait();
  if (!client_here) return IoError("load: the client left; the load was cancelled");
  return w.Send({{"ok", true},
                 {"done", true},
                 {"progress", LoadProgressToJson(job.progress())},
                 {"load", LoadResultToJson(result)}});
}

}  // namespace granary
