// PeerServer: serves this node's blocks, warm-ups and status to its peers
// over the peer protocol (docs/format-peer.md).
//
// Concurrency model: one acceptor thread; one reader thread per connection
// (handshake, then frame decoding); service calls run on a pool of
// `worker_threads` with a bounded queue (a full queue answers kError
// Unavailable "busy" at once). Connections are pipelined: a reader keeps
// reading while requests run, up to kMaxInFlightPerConnection, and replies
// go out in completion order, matched by request id; writes on a connection
// are serialized by its write lock. Payloads that come as a file region are
// sent with sendfile(2).
//
// Failure: a malformed frame, a failed handshake, a partial frame or a reply
// write stalled for io_timeout drops that connection only. Idle connections
// that are between frames are kept (max_connections bounds them).
//
// Thread safety: Start, address and stats are thread-safe; the destructor
// stops everything (closes connections, drops queued requests, waits for
// running service calls) and must not race with other calls.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "granary/status.h"
#include "net/frame.h"
#include "net/peer_service.h"

namespace granary::net {

// Requests one connection may have queued or running; its reader waits past this.
inline constexpr int kMaxInFlightPerConnection = 256;

struct PeerServerOptions {
  std::string listen = "0.0.0.0:7070";          // HOST:PORT; port 0 picks one
  std::string secret;                           // shared secret; "" = insecure
  std::string dataset;                          // dataset id this node serves (required)
  std::string node_id;                          // shown to clients in kHello
  std::chrono::milliseconds io_timeout{10000};  // handshake, partial frame, reply write limit
  int max_connections = 256;                    // more are answered kError Unavailable and closed
  int worker_threads = 16;                      // service calls run here (may block on the origin)
  int max_queued_requests = 4096;               // worker queue bound; past it requests get "busy"

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

// Counters since Start (monotonic, except connections_open).
struct PeerServerStats {
  uint64_t connections_accepted = 0;  // connections that reached the handshake
  uint64_t connections_refused = 0;   // closed at once: max_connections reached
  uint64_t connections_open = 0;      // open now
  uint64_t auth_failures = 0;         // handshakes refused (secret, auth mode, dataset)
  uint64_t protocol_errors = 0;       // connections dropped for bad frames or bad bodies
  uint64_t busy_rejections = 0;       // requests answered "busy" (queue full)
  uint64_t service_errors = 0;        // requests answered with a kError from the service
  std::array<uint64_t, kOpSlots> requests_by_op{};  // frames received after the handshake, by op
  uint64_t bytes_sent = 0;  // reply bytes, headers included (counted as a reply starts)
};

class PeerServer {
 public:
  // Binds, listens and starts serving. `service` must outlive the server.
  static Result<std::unique_ptr<PeerServer>> Start(PeerServerOptions o, PeerService* service);
  ~PeerServer();
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  // The bound "host:port" (the real port when options asked for 0).
  std::string address() const;
  PeerServerStats stats() const;

  struct State;  // defined in peer_server.cc

 private:
  explicit PeerServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace granary::net
