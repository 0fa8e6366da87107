// ControlServer, ControlClient and the load JSON codecs (see control.h).
#include "control/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "common/log.h"
#include "common/mountinfo.h"
#include "control/run_files.h"

namespace granary {

using nlohmann::json;

struct ControlServer::Connection {
  int fd = -1;
  std::thread thread;
  std::atomic<bool> done{false};
  std::string buffer;  // bytes read past the last request line
};

namespace {

json ErrorReply(std::string_view message) {
  return {{"v", kControlProtocolVersion}, {"ok", false}, {"error", message}};
}

json OkReply() { return {{"v", kControlProtocolVersion}, {"ok", true}}; }

// Writes all of `line` + '\n'; false when the peer is gone.
bool WriteLine(int fd, const json& j) {
  std::string s = j.dump() + "\n";
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until a full line is in `buffer` and returns it (without '\n'); nullopt
// on EOF/error. Lines longer than `max` yield an empty optional as well (closed).
std::optional<std::string> ReadLine(int fd, std::string& buffer, size_t max) {
  for (;;) {
    if (size_t nl = buffer.find('\n'); nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    if (buffer.size() > max) return std::nullopt;
    char chunk[8192];
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

// The sockaddr of a unix socket path; InvalidArgument when it does not fit.
}  // namespace

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return InvalidArgument("socket path too long: " + path);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

Result<int> ConnectUnix(const std::string& path) {
  ASSIGN_OR_RETURN(const sockaddr_un addr, UnixAddress(path));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    if (err == ENOENT || err == ECONNREFUSED)
      return NotFound("no granary daemon listens on " + path);
    return ErrnoStatus("connect " + path, err);
  }
  return fd;
}

namespace {

// Appends the lines of `list_file` to request.list_lines. InvalidArgument when
// it cannot be read or is empty.
Status ReadListFile(const std::string& list_file, LoadRequest& request) {
  std::ifstream in(list_file);
  if (!in) return InvalidArgument("cannot read list file " + list_file);
  for (std::string line; std::getline(in, line);) request.list_lines.push_back(std::move(line));
  if (request.list_lines.empty()) return InvalidArgument("list file " + list_file + " is empty");
  return Status::Ok();
}

}  // namespace

std::string ControlSocketPath(std::string_view run_dir, std::string_view mountpoint) {
  return RunFilePath(run_dir, mountpoint, "sock");
}

Result<std::unique_ptr<ControlServer>> ControlServer::Start(ControlOptions options,
                                                            ControlHandler* handler) {
  const std::string& path = options.socket_path;
  if (path.empty()) return InvalidArgument("control socket: socket_path is empty");
  if (options.max_connections < 1)
    return InvalidArgument("control socket: max_connections must be >= 1");
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return IoError("control socket: cannot create " + dir.string() + ": " + ec.message());
    ::chmod(dir.c_str(), 0700);
  }
  if (auto live = ConnectUnix(path); live.ok()) {
    ::close(*live);
    return InvalidArgument("control socket " + path + " is in use by a running daemon");
  }
  ::unlink(path.c_str());
  ASSIGN_OR_RETURN(const sockaddr_un addr, UnixAddress(path));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 64) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("control socket " + path, err);
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("eventfd", err);
  }
  auto server =
      std::unique_ptr<ControlServer>(new ControlServer(std::move(options), handler, fd, wake));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

ControlServer::ControlServer(ControlOptions options, ControlHandler* handler, int listen_fd,
                             int wake_fd)
    : options_(std::move(options)), handler_(handler), listen_fd_(listen_fd), wake_fd_(wake_fd) {}

ControlServer::~ControlServer() {
  stopping_.store(true);
  uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof(one)) < 0) GLOG_WARN("control socket: wake failed");
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    MutexLock lock(conns_mu_);
    for (auto& c : conns_) ::shutdown(c->fd, SHUT_RDWR);
  }
  for (auto& c : conns_) {
    if (c->thread.joinable()) c->thread.join();
    ::close(c->fd);
  }
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(options_.socket_path.c_str());
}

void ControlServer::ReapFinished() {
  MutexLock lock(conns_mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      ::close((*it)->fd);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void ControlServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{.fd = listen_fd_, .events = POLLIN}, {.fd = wake_fd_, .events = POLLIN}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      GLOG_ERROR("control socket: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0 || stopping_.load()) return;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ReapFinished();
    MutexLock lock(conns_mu_);
    if (conns_.size() >= static_cast<size_t>(options_.max_connections)) {
      if (!WriteLine(fd, ErrorReply("too many control connections (" +
                                    std::to_string(options_.max_connections) + "); try again"))) {
        GLOG_DEBUG("control socket: client left before the busy reply");
      }
      ::close(fd);
      continue;
    }
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    Connection* c = conn.get();
    conns_.push_back(std::move(conn));
    c->thread = std::thread([this, c] { Serve(c); });
  }
}

void ControlServer::Serve(Connection* conn) {
  while (!stopping_.load()) {
    std::optional<std::string> line = ReadLine(conn->fd, conn->buffer, options_.max_request_bytes);
    if (!line) {
      if (conn->buffer.size() > options_.max_request_bytes) {
        (void)WriteLine(conn->fd,
                        ErrorReply("request longer than " +
                                   std::to_string(options_.max_request_bytes) + " bytes"));
      }
      break;
    }
    if (!HandleLine(conn, *line)) break;
  }
  conn->done.store(true);
}

bool ControlServer::HandleLine(Connection* conn, std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true;
  Result<ControlRequest> req = ParseControlRequest(line);
  if (!req.ok()) return WriteLine(conn->fd, ErrorReply(req.status().message()));
  try {
    switch (req->op) {
      case ControlOp::kStatus: {
        auto st = handler_->GetStatus();
        if (!st.ok()) return WriteLine(conn->fd, ErrorReply(st.status().ToString()));
        json reply = OkReply();
        reply["status"] = std::move(*st);
        return WriteLine(conn->fd, reply);
      }
      case ControlOp::kClusterStatus: {
        auto st = handler_->GetClusterStatus();
        if (!st.ok()) return WriteLine(conn->fd, ErrorReply(st.status().ToString()));
        json reply = OkReply();
        reply["cluster"] = std::move(*st);
        return WriteLine(conn->fd, reply);
      }
      case ControlOp::kLoad: return HandleLoad(conn, *req);
      case ControlOp::kCancel: {
        Status s = handler_->CancelLoad();
        return WriteLine(conn->fd, s.ok() ? OkReply() : ErrorReply(s.ToString()));
      }
      case ControlOp::kDrain: {
        Result<json> r = handler_->Drain();
        if (!r.ok()) return WriteLine(conn->fd, ErrorReply(r.status().ToString()));
        json reply = OkReply();
        reply["drain"] = *r;
        return WriteLine(conn->fd, reply);
      }
      case ControlOp::kSync: {
        Result<json> r = handler_->Sync();
        if (!r.ok()) return WriteLine(conn->fd, ErrorReply(r.status().ToString()));
        json reply = OkReply();
        reply["sync"] = *r;
        return WriteLine(conn->fd, reply);
      }
    }
  } catch (const json::exception& e) {
    return WriteLine(conn->fd, ErrorReply(std::string("bad request fields: ") + e.what()));
  }
  return WriteLine(conn->fd, ErrorReply("internal error: unhandled control op"));
}

bool ControlServer::HandleLoad(Connection* conn, const ControlRequest& req) {
  LoadRequest request = req.load;
  if (!req.list_file.empty()) {
    if (Status s = ReadListFile(req.list_file, request); !s.ok()) {
      return WriteLine(conn->fd, ErrorReply(s.ToString()));
    }
  }
  auto job = handler_->StartLoad(request);
  if (!job.ok()) return WriteLine(conn->fd, ErrorReply(job.status().ToString()));
  std::shared_ptr<LoadJob> j = *job;
  if (req.background) {
    json reply = OkReply();
    reply["started"] = true;
    reply["progress"] = LoadProgressToJson(j->progress());
    return WriteLine(conn->fd, reply);
  }
  bool peer_alive = true;
  auto next_progress = Clock::Real()->Now() + options_.progress_interval;
  while (!j->WaitFor(std::chrono::milliseconds(peer_alive ? 0 : 50))) {
    if (stopping_.load()) j->Cancel();
    // During a load the client sends nothing but "cancel"; EOF means it left (Ctrl-C).
    pollfd p{.fd = conn->fd, .events = POLLIN};
    if (peer_alive && ::poll(&p, 1, 50) > 0) {
      char chunk[4096];
      ssize_t n = ::recv(conn->fd, chunk, sizeof(chunk), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        peer_alive = false;
        j->Cancel();
      } else if (n > 0) {
        conn->buffer.append(chunk, static_cast<size_t>(n));
        if (conn->buffer.find("cancel") != std::string::npos) j->Cancel();
        if (conn->buffer.size() > options_.max_request_bytes) conn->buffer.clear();
      }
    }
    if (!peer_alive || Clock::Real()->Now() < next_progress) continue;
    next_progress += options_.progress_interval;
    json msg = OkReply();
    msg["progress"] = LoadProgressToJson(j->progress());
    if (!WriteLine(conn->fd, msg)) {
      peer_alive = false;
      j->Cancel();
    }
  }
  conn->buffer.clear();
  LoadResult r = j->Wait();
  json done = OkReply();
  done["done"] = true;
  done["progress"] = LoadProgressToJson(j->progress());
  done["result"] = LoadResultToJson(r);
  return peer_alive && WriteLine(conn->fd, done);
}

Result<std::unique_ptr<ControlClient>> ControlClient::Connect(const std::string& socket_path) {
  ASSIGN_OR_RETURN(int fd, ConnectUnix(socket_path));
  return std::unique_ptr<ControlClient>(new ControlClient(fd));
}

ControlClient::~ControlClient() { ::close(fd_); }

Status ControlClient::Send(const json& request) {
  if (!WriteLine(fd_, request)) return IoError("control socket: the daemon closed the connection");
  return Status::Ok();
}

Status ControlClient::SendCancel() {
  return Send({{"v", kControlProtocolVersion}, {"op", "cancel"}});
}

Result<json> ControlClient::Receive() {
  std::optional<std::string> line = ReadLine(fd_, buffer_, 256u << 20);
  if (!line) return IoError("control socket: the daemon closed the connection");
  json j = json::parse(*line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Corruption("control socket: malformed reply");
  return j;
}

Result<json> ControlCall(const std::string& socket_path, const json& request) {
  ASSIGN_OR_RETURN(auto client, ControlClient::Connect(socket_path));
  RETURN_IF_ERROR(client->Send(request));
  ASSIGN_OR_RETURN(json reply, client->Receive());
  if (!reply.value("ok", false))
    return Unavailable(reply.value("error", std::string("daemon error")));
  return reply;
}

std::vector<std::string> GranaryMounts() {
  std::vector<std::string> out;
  for (const MountEntry& m : ReadMountinfo()) {
    if (m.fstype == "fuse.granary") out.push_back(m.mountpoint);
  }
  return out;
}

Result<MountLocation> FindGranaryMount(std::string_view path) {
  std::string real = CanonicalMountpoint(path);
  MountLocation best;
  for (const std::string& mp : GranaryMounts()) {
    bool inside = real == mp || mp == "/" ||
                  (real.size() > mp.size() && real.starts_with(mp) && real[mp.size()] == '/');
    if (inside && mp.size() >= best.mountpoint.size()) {
      best.mountpoint = mp;
      best.subdir = real == mp ? "" : real.substr(mp == "/" ? 1 : mp.size() + 1);
    }
  }
  if (best.mountpoint.empty())
    return NotFound(std::string(path) + " is not inside a granary mount");
  return best;
}

json LoadProgressToJson(const LoadProgress& p) {
  return {{"files_total", p.files_total},
          {"bytes_total", p.bytes_total},
          {"files_done", p.files_done},
          {"bytes_done", p.bytes_done},
          {"files_skipped", p.files_skipped},
          {"bytes_fetched", p.bytes_fetched},
          {"elapsed_s", p.elapsed_s},
          {"bytes_per_s", p.bytes_per_s},
          {"files_per_s", p.files_per_s},
          {"eta_s", p.eta_s},
          {"running", p.running}};
}

LoadProgress LoadProgressFromJson(const json& j) {
  return {.files_total = j.value("files_total", uint64_t{0}),
          .bytes_total = j.value("bytes_total", uint64_t{0}),
          .files_done = j.value("files_done", uint64_t{0}),
          .bytes_done = j.value("bytes_done", uint64_t{0}),
          .files_skipped = j.value("files_skipped", uint64_t{0}),
          .bytes_fetched = j.value("bytes_fetched", uint64_t{0}),
          .elapsed_s = j.value("elapsed_s", 0.0),
          .bytes_per_s = j.value("bytes_per_s", 0.0),
          .files_per_s = j.value("files_per_s", 0.0),
          .eta_s = j.value("eta_s", -1.0),
          .running = j.value("running", false)};
}

json LoadResultToJson(const LoadResult& r) {
  json failures = json::array();
  for (const auto& f : r.failures) failures.push_back({{"path", f.path}, {"reason", f.reason}});
  return {{"files_requested", r.files_requested},
          {"bytes_requested", r.bytes_requested},
          {"files_cached", r.files_cached},
          {"bytes_cached", r.bytes_cached},
          {"files_not_fitted", r.files_not_fitted},
          {"bytes_not_fitted", r.bytes_not_fitted},
          {"files_failed", r.files_failed},
          {"failures", failures},
          {"files_not_loaded", r.files_not_loaded},
          {"missing_count", r.missing_count},
          {"missing", r.missing},
          {"cancelled", r.cancelled},
          {"elapsed_s", r.elapsed_s},
          {"complete", r.complete()}};
}

LoadResult LoadResultFromJson(const json& j) {
  LoadResult r{.files_requested = j.value("files_requested", uint64_t{0}),
               .bytes_requested = j.value("bytes_requested", uint64_t{0}),
               .files_cached = j.value("files_cached", uint64_t{0}),
               .bytes_cached = j.value("bytes_cached", uint64_t{0}),
               .files_not_fitted = j.value("files_not_fitted", uint64_t{0}),
               .bytes_not_fitted = j.value("bytes_not_fitted", uint64_t{0}),
               .files_failed = j.value("files_failed", uint64_t{0}),
               .files_not_loaded = j.value("files_not_loaded", uint64_t{0}),
               .missing_count = j.value("missing_count", uint64_t{0}),
               .missing = j.value("missing", std::vector<std::string>{}),
               .cancelled = j.value("cancelled", false),
               .elapsed_s = j.value("elapsed_s", 0.0)};
  if (auto f = j.find("failures"); f != j.end() && f->is_array()) {
    for (const auto& e : *f) {
      r.failures.push_back(
          {.path = e.value("path", std::string()), .reason = e.value("reason", std::string())});
    }
  }
  return r;
}

}  // namespace granary
