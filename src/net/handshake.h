// The connect-time handshake over a socket (kHello / kAuth / kAuthOk; the
// steps themselves are in auth.h), and a blocking one-frame reader both
// sides use for it.
//
// Thread safety: each function uses only its arguments; one thread per socket.
#pragma once

#include <string>
#include <string_view>

#include "granary/status.h"
#include "net/auth.h"
#include "net/frame.h"
#include "net/socket.h"

namespace granary::net {

// Reads the next whole frame from fd before `deadline` (bytes already fed
// to `decoder` count). Unavailable on timeout or a closed connection;
// Corruption for a bad frame.
Result<Frame> ReadFrame(int fd, FrameDecoder& decoder, Deadline deadline);

// Sends one frame before `deadline`.
Status WriteFrame(int fd, Op op, uint64_t request_id, std::string_view payload, Deadline deadline);

// How a server-side handshake ended.
enum class HandshakeFailure {
  kNone,      // success
  kAuth,      // the client was refused (secret, auth mode, dataset)
  kProtocol,  // the client sent a bad or unexpected frame
  kIo,        // the connection failed or stalled
};

struct ServerHandshakeResult {
  HandshakeFailure failure = HandshakeFailure::kNone;
  Status status;          // why it failed; for kAuth the caller sends it back in a kError frame
  std::string client_id;  // the client's node id, on success
};

// Runs the server side on an accepted connection. On an auth failure the
// caller counts it, then sends `status` to the client (SendHandshakeRefusal).
ServerHandshakeResult ServerHandshake(int fd, FrameDecoder& decoder, const AuthConfig& self,
                                      std::string_view peer, Deadline deadline);

// Sends the kError frame that tells a client why its handshake was refused.
void SendHandshakeRefusal(int fd, const Status& why, Deadline deadline);

// Runs the client side on a connected socket. Errors are prefixed with
// "peer <peer>": PermissionDenied (refused, or the server failed to prove
// the secret), InvalidArgument (dataset mismatch), Corruption (protocol),
// Unavailable (timeout, closed), or the code of the server's kError.
Status ClientHandshake(int fd, FrameDecoder& decoder, const AuthConfig& self, std::string_view peer,
                       Deadline deadline);

}  // namespace granary::net
