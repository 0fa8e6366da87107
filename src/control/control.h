// The control ops of a served dataset -- what `granary load`, `granary status`,
// `granary sync`, `status --cluster` and a drain ask a running daemon -- and
// the client side of the daemon's socket. The daemon serves them on the same
// socket as the native client API (ApiServer, api/server.h: one socket, one
// protocol, newline-delimited JSON; the ops are in docs/load-status.md):
//   {"op":"status"}                            -> {"ok":true,"status":{...}}
//   {"op":"load","path":"train","list_file":"/abs/list.txt","threads":128,
//    "check":false,"background":false,"progress":true}
//                                              -> {"ok":true,"progress":{...}} lines
//                                                 (only with "progress"), then
//                                                 {"ok":true,"done":true,"progress":{...},
//                                                  "load":{...}} (LoadResultToJson)
//   {"op":"cancel"}                            -> cancels the running load
//   {"op":"sync"}                              -> {"ok":true,"sync":{...}}
// A request may carry "v":1 (kControlProtocolVersion); another version is
// refused. Errors: {"ok":false,"code":<granary::Code>,"error":"..."}. A client
// that disconnects during a foreground load (Ctrl-C) cancels it.
//
// The socket: <run_dir>/mount-<hash of the mount point>.sock (DaemonSocketPath), in
// a run directory created 0700, the socket itself 0600: only the owner may
// connect.
//
// Thread safety: ControlHandler implementations are called from connection
// threads concurrently and must be thread-safe. ControlClient is not
// thread-safe (one per thread).
#pragma once

#include <sys/un.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "control/control_request.h"
#include "control/loader.h"
#include "control/status.h"
#include "control/wire.h"
#include "granary/status.h"

namespace granary {

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

// The control ops of a dataset served in this process (an in-process
// client's socket; the base of the daemon's): status and loads. Borrows both
// (they must outlive it).
class LocalControl : public ControlHandler {
 public:
  LocalControl(LoadManager* loads, StatusReporter* status) : loads_(loads), status_(status) {}
  Result<nlohmann::json> GetStatus() override;
  Result<std::shared_ptr<LoadJob>> StartLoad(const LoadRequest& request) override;
  Status CancelLoad() override;
  Result<nlohmann::json> Sync() override {
    return Unimplemented("sync: this dataset is served in the process that opened it");
  }

 private:
  LoadManager* loads_;
  StatusReporter* status_;
};

// A connection to a daemon's socket for the control ops.
class ControlClient {
 public:
  // NotFound "no granary daemon listens on <path>" when nothing answers.
  static Result<std::unique_ptr<ControlClient>> Connect(const std::string& socket_path);

  Status Send(const nlohmann::json& request);
  // The next reply line. IoError when the daemon closed the connection.
  Result<nlohmann::json> Receive();
  // Sends a cancel for the running load on this connection.
  Status SendCancel();

 private:
  explicit ControlClient(int fd) : wire_(fd) {}
  WireConn wire_;
};

// The address of a Unix socket path; InvalidArgument when it is too long.
Result<sockaddr_un> UnixAddress(const std::string& path);
// Connects to a Unix stream socket (close-on-exec). NotFound "no granary
// daemon listens on <path>" when nothing does.
Result<int> ConnectUnix(const std::string& path);

// One request, one reply: the reply object when "ok" is true, else the
// daemon's error (its code and message).
Result<nlohmann::json> ControlCall(const std::string& socket_path, const nlohmann::json& request);

// <run_dir>/mount-<hash of the canonical mount point>.sock: the daemon's one
// socket (control ops and attached clients).
std::string DaemonSocketPath(std::string_view run_dir, std::string_view mountpoint);

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
