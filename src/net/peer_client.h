// PeerClient: calls one remote peer's PeerServer (docs/format-peer.md).
//
// Concurrency model: a pool of `connections` sockets per peer, opened lazily
// (connect + handshake) by the first call that needs one; callers pick a
// connection round-robin and pipeline on it: each call writes its frame under
// the connection's write lock and waits for the reply with its request id,
// which the connection's reader thread hands over. Replies may come in any
// order. A broken connection (closed, reset, bad frame) fails every request
// outstanding on it at once and is replaced by the next call that picks it;
// a call that fails because a reused connection turned out to be closed is
// retried once on a fresh connection (all requests are idempotent).
//
// Deadlines: connect + handshake within min(connect_timeout, what is left of
// request_timeout); the whole call within request_timeout, so a peer that
// accepts and never answers costs a caller at most request_timeout.
//
// Errors: cannot connect / refused / timeout / connection lost → Unavailable;
// auth refused → PermissionDenied; dataset mismatch → InvalidArgument; bad
// frame or payload checksum → Corruption (a block whose checksum fails is
// never returned); a remote kError → its code. Messages start "peer <address>".
//
// Thread safety: every method is thread-safe. The destructor must not race
// with calls.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "granary/status.h"
#include "net/frame.h"
#include "net/peer_service.h"
#include "net/socket.h"

namespace granary::net {

// Upper bounds (seconds) of the peer request latency histogram buckets; one
// more bucket (+Inf) follows the last.
inline constexpr std::array<double, 12> kPeerLatencyBounds = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0};
inline constexpr size_t kPeerLatencyBuckets = kPeerLatencyBounds.size() + 1;

// Why a peer call failed.
enum class PeerErrorKind : uint8_t {
  kConnect = 0,         // could not connect (refused, unreachable, connect/handshake timeout)
  kTimeout = 1,         // the request got no reply within request_timeout
  kAuth = 2,            // the handshake was refused (secret, auth mode, dataset)
  kProtocol = 3,        // a malformed or unexpected frame or body
  kChecksum = 4,        // a payload failed its checksum
  kRemote = 5,          // the peer answered kError (its code is returned)
  kConnectionLost = 6,  // the connection broke while the request was outstanding
};
inline constexpr size_t kPeerErrorKinds = 7;
// "connect", "timeout", "auth", "protocol", "checksum", "remote", "connection_lost".
const char* PeerErrorKindName(PeerErrorKind kind);

struct PeerClientOptions {
  std::string secret;                               // shared secret; "" = insecure
  std::string dataset;                              // dataset id this node serves
  std::string node_id;                              // this node's id (sent in kAuth)
  std::chrono::milliseconds connect_timeout{1000};  // connect + handshake
  std::chrono::milliseconds request_timeout{5000};  // end-to-end per request
  int connections = 2;                              // pool per peer (at least 1)
};

// Counters since construction (monotonic).
struct PeerClientStats {
  uint64_t requests = 0;                           // calls made
  uint64_t bytes_received = 0;                     // reply frame bytes, headers included
  uint64_t connects = 0;                           // connections opened (handshake done)
  std::array<uint64_t, kPeerErrorKinds> errors{};  // failed calls by PeerErrorKind
  // Call latency: count per bucket of kPeerLatencyBounds (not cumulative; last = +Inf), and sum.
  std::array<uint64_t, kPeerLatencyBuckets> latency_buckets{};
  double latency_sum_s = 0;
};

class PeerClient {
 public:
  PeerClient(std::string address, PeerClientOptions o);
  ~PeerClient();
  PeerClient(const PeerClient&) = delete;
  PeerClient& operator=(const PeerClient&) = delete;

  // The block's bytes (r's range), checksum-verified, in an aligned buffer
  // they were received into; when r.length > 0 the reply must hold exactly
  // r.length bytes (else Corruption).
  Result<BlockData> GetBlock(const BlockRequest& r);
  // Asks the peer to cache the whole object; true = cached there.
  Result<bool> Warm(const BlockRequest& r);
  // GetBlock, answered only from what the peer holds: NotFound when it does
  // not (it fetches nothing for this request).
  Result<BlockData> GetCachedBlock(const BlockRequest& r);
  // The peer's status JSON.
  Result<std::string> StatusJson();
  // A kPing round trip (opens a connection if none is open): OK if the peer answers.
  Status Ping();

  const std::string& address() const { return address_; }
  PeerClientStats stats() const;

  class Connection;  // defined in peer_client.cc
  struct Counters;   // defined in peer_client.cc

 private:
  struct Outcome;  // a reply frame's payload, or an error and its kind
  struct Slot;     // one pooled connection and the lock that guards opening it
  // The reply's payload; a kBlock reply's goes to *block instead (when set).
  Result<std::string> Call(Op op, const std::string& payload, Op expected,
                           BlockData* block = nullptr);
  // GetBlock / GetCachedBlock.
  Result<BlockData> BlockCall(Op op, const BlockRequest& r);
  Outcome CallOnce(Op op, const std::string& payload, Deadline deadline, bool* reused);
  Result<std::shared_ptr<Connection>> Acquire(Deadline deadline, bool* reused);
  Result<std::shared_ptr<Connection>> OpenConnection(Deadline deadline);
  void CountError(PeerErrorKind kind);
  void RecordLatency(Deadline start);

  const std::string address_;
  const PeerClientOptions opts_;
  // Declared before slots_: members are destroyed in reverse order, and a
  // connection's reader thread (joined when its slot goes) may still count a
  // late reply, so the counters must outlive every slot.
  std::unique_ptr<Counters> counters_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<uint64_t> next_slot_{0};
};

}  // namespace granary::net
