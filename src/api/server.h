// ApiServer: serves an ApiService to attached clients (Client::Attach) on a
// Unix socket; the protocol is in docs/api.md and wire.h.
//
// Requests ({"op":...} JSON lines, one reply each):
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
//   load {path}                -> {"ok":true,"load":{...}}
//   status                     -> {"ok":true,"status":{...}} (`granary status --json`)
//   touch {version,inos}       -> {"ok":true,"version":V,"touch_batch":N} (reads of files
//                                 the client opened itself; V: the version served now)
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
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "api/service.h"
#include "api/wire.h"
#include "common/json_fields.h"
#include "common/mutex.h"

namespace granary {

class ApiServer {
 public:
  // Borrows `service` (must outlive the server). Replaces a stale socket
  // file; InvalidArgument when a live server answers on `socket_path`.
  static Result<std::unique_ptr<ApiServer>> Start(ApiService* service, std::string socket_path,
                                                  int max_connections = 1024);
  // Closes the socket and every connection, joins, removes the socket file.
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  const std::string& socket_path() const { return path_; }

 private:
  struct Conn;
  ApiServer(ApiService* service, std::string path, int listen_fd, int wake_fd, int max_connections);
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
  Status LoadOp(WireConn& w, const JsonFields& in, const std::string& path);
  Status StatusOp(WireConn& w);
  Status TouchOp(WireConn& w, JsonFields& in);

  ApiService* service_;
  std::string path_;
  int listen_fd_;
  int wake_fd_;
  int max_connections_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  Mutex conns_mu_;  // guards conns_; a leaf lock
  std::list<std::unique_ptr<Conn>> conns_ GUARDED_BY(conns_mu_);
};

// The attach socket of a daemon whose control socket is `control_socket`
// ("<run_dir>/mount-<hash>.sock" -> "<run_dir>/mount-<hash>.api.sock").
std::string ApiSocketPathFor(const std::string& control_socket);

}  // namespace granary
