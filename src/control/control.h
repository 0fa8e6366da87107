// Control socket of a mount daemon: `granary load`, `granary status` and
// `granary sync` talk to the running daemon through it, so they share its cache
// and counters.
//
// Transport: a unix stream socket at <run_dir>/mount-<hash of the mount
// point>.sock (ControlSocketPath), in a run directory created 0700, the socket
// itself chmod 0600: only the owner may connect. Protocol (docs/load-status.md):
// newline-delimited JSON, one request per line, version 1:
//   {"v":1,"op":"status"}                      -> {"v":1,"ok":true,"status":{...}}
//   {"v":1,"op":"load","path":"train","list_file":"/abs/list.txt","threads":128,
//    "check":false,"background":false}          -> {"v":1,"ok":true,"progress":{...}} lines,
//                                                  then
//                                                  {"v":1,"ok":true,"done":true,"result":{...}}
//   {"v":1,"op":"cancel"}                      -> cancels the running load
//   {"v":1,"op":"sync"}                        -> {"v":1,"ok":true,"sync":{...}}
// Errors: {"v":1,"ok":false,"error":"..."}. Malformed JSON, a wrong version, an
// unknown op or bad fields get an error reply and the connection stays usable.
// A client that disconnects during a foreground load (Ctrl-C) cancels it.
//
// Thread safety: ControlServer runs one accept thread and one thread per
// connection (at most max_connections; more get an error reply and are closed).
// The handler is called from connection threads concurrently and must be
// thread-safe. conns_mu_ guards the connection list. ControlClient is not
// thread-safe (one per thread).
#pragma once

#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "control/control_request.h"
#include "control/loader.h"
#include "granary/status.h"

namespace granary {

struct ControlOptions {
  // Socket path (see ControlSocketPath). Required. Its directory is created 0700 if missing.
  std::string socket_path;
  // Connections served at once; more get an error reply.
  int max_connections = 16;
  // How often a foreground load sends a progress line.
  std::chrono::milliseconds progress_interval{500};
  // Longest request line accepted (bytes).
  size_t max_request_bytes = 1 << 20;
};

// What the daemon does for each op. Implementations must be thread-safe.
class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  // The dataset status as JSON (StatusToJson).
  virtual Result<nlohmann::json> GetStatus() = 0;
  // Starts a load (one at a time: Unavailable while one runs).
  virtual Result<std::shared_ptr<LoadJob>> StartLoad(const LoadRequest& request) = 0;
  // Cancels the running load (NotFound when none runs).
  virtual Status CancelLoad() = 0;
  // Re-lists the origin and switches to the new snapshot version (`granary
  // sync`); returns what changed (SyncResult as JSON).
  virtual Result<nlohmann::json> Sync() = 0;
  // Every cluster member's status and the cluster's totals (`granary status
  // --cluster`). Unimplemented on a single node.
  virtual Result<nlohmann::json> GetClusterStatus() {
    return Unimplemented("this daemon is not part of a cluster (no --cluster-listen)");
  }
  // Starts this member's graceful leave (the first call; later ones only
  // look) and returns its progress (DrainStats as JSON). The daemon stops
  // once the drain ends. Unimplemented on a single node.
  virtual Result<nlohmann::json> Drain() {
    return Unimplemented("this daemon is not part of a cluster (no --cluster-listen)");
  }
};

class ControlServer {
 public:
  // Binds the socket (replacing a stale one; InvalidArgument if a live daemon
  // answers on it) and starts serving. `handler` is borrowed and must outlive
  // the server.
  static Result<std::unique_ptr<ControlServer>> Start(ControlOptions options,
                                                      ControlHandler* handler);
  // Stops: closes the socket and every connection, joins threads, removes the socket file.
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Connection;
  ControlServer(ControlOptions options, ControlHandler* handler, int listen_fd, int wake_fd);
  void AcceptLoop();
  void Serve(Connection* conn);
  // Handles one request line; false when the connection must close.
  bool HandleLine(Connection* conn, std::string_view line);
  bool HandleLoad(Connection* conn, const ControlRequest& req);
  void ReapFinished();

  ControlOptions options_;
  ControlHandler* handler_;
  int listen_fd_;
  int wake_fd_;  // eventfd: wakes the accept loop on shutdown
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  Mutex conns_mu_;  // guards conns_; a leaf lock
  std::list<std::unique_ptr<Connection>> conns_ GUARDED_BY(conns_mu_);
};

// A connection to a daemon's control socket.
class ControlClient {
 public:
  // NotFound "no granary daemon listens on <path>" when nothing answers.
  static Result<std::unique_ptr<ControlClient>> Connect(const std::string& socket_path);
  ~ControlClient();

  Status Send(const nlohmann::json& request);
  // The next reply line. IoError when the daemon closed the connection.
  Result<nlohmann::json> Receive();
  // Sends a cancel for the running load on this connection.
  Status SendCancel();

 private:
  explicit ControlClient(int fd) : fd_(fd) {}
  int fd_;
  std::string buffer_;
};

// The address of a Unix socket path; InvalidArgument when it is too long.
Result<sockaddr_un> UnixAddress(const std::string& path);
// Connects to a Unix stream socket (close-on-exec). NotFound "no granary
// daemon listens on <path>" when nothing does.
Result<int> ConnectUnix(const std::string& path);

// One request, one reply: the reply object when "ok" is true, else the
// daemon's error (message as sent).
Result<nlohmann::json> ControlCall(const std::string& socket_path, const nlohmann::json& request);

// <run_dir>/mount-<hash of the canonical mount point>.sock.
std::string ControlSocketPath(std::string_view run_dir, std::string_view mountpoint);

// A path inside a granary mount.
struct MountLocation {
  std::string mountpoint;  // the mount point (canonical)
  std::string subdir;      // the path below it ("" = the mount root)
};

// Mount points of type fuse.granary on this machine (/proc/self/mountinfo).
std::vector<std::string> GranaryMounts();

// The granary mount holding `path` (the deepest one). NotFound "... is not
// inside a granary mount" otherwise.
Result<MountLocation> FindGranaryMount(std::string_view path);

nlohmann::json LoadProgressToJson(const LoadProgress& p);
nlohmann::json LoadResultToJson(const LoadResult& r);
LoadResult LoadResultFromJson(const nlohmann::json& j);
LoadProgress LoadProgressFromJson(const nlohmann::json& j);

}  // namespace granary
