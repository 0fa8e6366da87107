// LocalControl, ControlClient, the daemon's socket path and the load JSON
// codecs (see control.h).
#include "control/control.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/mountinfo.h"
#include "control/run_files.h"

namespace granary {

using nlohmann::json;

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

std::string DaemonSocketPath(std::string_view run_dir, std::string_view mountpoint) {
  return RunFilePath(run_dir, mountpoint, "sock");
}

Result<json> LocalControl::GetStatus() { return StatusToJson(status_->Compute()); }

Result<std::shared_ptr<LoadJob>> LocalControl::StartLoad(const LoadRequest& request) {
  return loads_->Start(request);
}

Status LocalControl::CancelLoad() { return loads_->Cancel(); }

Result<std::unique_ptr<ControlClient>> ControlClient::Connect(const std::string& socket_path) {
  ASSIGN_OR_RETURN(int fd, ConnectUnix(socket_path));
  return std::unique_ptr<ControlClient>(new ControlClient(fd));
}

Status ControlClient::Send(const json& request) {
  Status s = wire_.Send(request);
  if (!s.ok()) return IoError("daemon socket: the daemon closed the connection");
  return s;
}

Status ControlClient::SendCancel() { return Send({{"op", "cancel"}}); }

Result<json> ControlClient::Receive() {
  Result<std::string> line = wire_.ReadLine(256u << 20);
  if (!line.ok()) return IoError("daemon socket: the daemon closed the connection");
  json j = json::parse(*line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Corruption("daemon socket: malformed reply");
  return j;
}

Result<json> ControlCall(const std::string& socket_path, const json& request) {
  ASSIGN_OR_RETURN(auto client, ControlClient::Connect(socket_path));
  RETURN_IF_ERROR(client->Send(request));
  ASSIGN_OR_RETURN(json reply, client->Receive());
  RETURN_IF_ERROR(StatusFromReply(reply));
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
          {"missing", r.missing},
          {"missing_paths", r.missing_paths},
          {"cancelled", r.cancelled},
          {"elapsed_s", r.elapsed_s},
          {"complete", r.complete()}};
}

LoadResult LoadResultFromJson(const json& j) {
  if (!j.is_object()) return LoadResult{};
  LoadResult r{.files_requested = j.value("files_requested", uint64_t{0}),
               .bytes_requested = j.value("bytes_requested", uint64_t{0}),
               .files_cached = j.value("files_cached", uint64_t{0}),
               .bytes_cached = j.value("bytes_cached", uint64_t{0}),
               .files_not_fitted = j.value("files_not_fitted", uint64_t{0}),
               .bytes_not_fitted = j.value("bytes_not_fitted", uint64_t{0}),
               .files_failed = j.value("files_failed", uint64_t{0}),
               .files_not_loaded = j.value("files_not_loaded", uint64_t{0}),
               .missing_paths = j.value("missing_paths", std::vector<std::string>{}),
               .cancelled = j.value("cancelled", false),
               .elapsed_s = j.value("elapsed_s", 0.0)};
  // A daemon from before the one load-result type named the paths "missing"
  // and their count "missing_count" (a `granary load` run against a daemon
  // not yet upgraded).
  if (auto m = j.find("missing"); m != j.end() && m->is_array()) {
    r.missing_paths = m->get<std::vector<std::string>>();
    r.missing = j.value("missing_count", uint64_t{r.missing_paths.size()});
  } else {
    r.missing = j.value("missing", uint64_t{0});
  }
  if (auto f = j.find("failures"); f != j.end() && f->is_array()) {
    for (const auto& e : *f) {
      r.failures.push_back(
          {.path = e.value("path", std::string()), .reason = e.value("reason", std::string())});
    }
  }
  return r;
}

}  // namespace granary
