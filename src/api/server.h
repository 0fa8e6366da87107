// ApiServer: the daemon's one socket (and an in-process client's, Client::Serve):
// the native client API for attached clients (Client::Attach) and the control
// ops of `granary load/status/sync` (ControlHandler, control/control.h). One
// protocol: newline-delimited JSON requests {"op":...}, one reply each (a
// foreground load asked for progress streams lines first); docs/api.md and
// docs/load-status.md.
//
// The client API's requests:
//   hello                      -> {"ok":true,"v":1,"info":{source,files,bytes,version},
//                                  "direct":{snapshot,version,dataset,block_size,tiers,
//                                            trusted_since_ns,touch_batch}} (DirectLayout;
//                                  touch_batch: Prefetcher::touch_batch)
//   stat {path}                -> {"ok":true,"entry":[path,is_dir,size,mtime_ns]}
//   list {path,recursive}      -> {"ok":true,"entries":[[path,is_dir,size,mtime_ns],...]}
//   open {path}                -> {"ok":true,"fd":true|false,"size","ino","version"}
//                                 (+ the descriptor as SCM_RIGHTS when "fd" is true)
//   read {path,offset,length}  -> {"ok":true,"n":N} + N raw bytes (length <= 64 MiB)
//   prefetch {paths,window}    -> {"ok":true,"touch_batch":N}
//   prefetch_status            -> {"ok":true,"progress":{...}}
//   touch {version,inos}       -> {"ok":true,"version":V,"touch_batch":N} (reads of files
//                                 the client opened itself; V: the version served now)
// The control ops (status, load, cancel, sync, cluster_status, drain) are in
// control/control.h.
// Errors: {"ok":false,"code":<granary::Code>,"error":"..."}; the connection
// stays usable except after a malformed or oversized line.
//
// The socket is created 0600 in a directory created 0700: only its owner
// (and root) may attach.
//
// Thread safety: one accept thread and one thread per connection (at most
// max_connections; more are refused). conns_mu_ guards conns_.
#pragma once

#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "api/service.h"
#include "common/json_fields.h"
#include "common/mutex.h"
#include "control/control.h"

namespace granary {

class ApiServer {
 public:
  // Borrows `service` and `control` (both must outlive the server; a null
  // `control` answers the control ops Unimplemented). Replaces a stale
  // socket file; InvalidArgument when a live server answers on `socket_path`.
  static Result<std::unique_ptr<ApiServer>> Start(ApiService* service, ControlHandler* control,
                                                  std::string socket_path,
                                                  int max_connections = 1024);
  // How often a foreground load asked for progress sends a progress line.
  static constexpr std::chrono::milliseconds kProgressInterval{500};
  // Closes the socket and every connection, joins, removes the socket file.
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  const std::string& socket_path() const { return path_; }

 private:
  struct Conn;
  ApiServer(ApiService* service, ControlHandler* control, std::string path, int listen_fd,
            int wake_fd, int max_connections);
  void AcceptLoop();
  // Reads requests from `c` and answers each until it closes or a reply
  // cannot be sent.
  void Serve(Conn* c);
  // Answers one request (a bad one gets an error reply); an error only when
  // the reply could not be sent.
  Status Answer(WireConn& w, const nlohmann::json& req);
  // One op each (docs/api.md): `in` reads the request's fields, `path` its "path".
  Status Hello(WireConn& w);
  Status StatOp(WireConn& w, const JsonFields& in, const std::string& path);
  Status ListOp(WireConn& w, JsonFields& in, const std::string& path);
  Status OpenOp(WireConn& w, const JsonFields& in, const std::string& path);
  Status ReadOp(WireConn& w, JsonFields& in, const std::string& path);
  Status PrefetchOp(WireConn& w, JsonFields& in);
  Status PrefetchStatusOp(WireConn& w);
  Status TouchOp(WireConn& w, JsonFields& in);
  // The control ops (ControlRequest), answered through control_.
  Status AnswerControl(WireConn& w, const nlohmann::json& req);
  Status LoadOp(WireConn& w, const ControlRequest& req);

  ApiService* service_;
  ControlHandler* control_;
  std::string path_;
  int listen_fd_;
  int wake_fd_;
  int max_connections_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  Mutex conns_mu_;  // guards conns_; a leaf lock
  std::list<std::unique_ptr<Conn>> conns_ GUARDED_BY(conns_mu_);
};

}  // namespace granary
