// Peer protocol bodies: the payload of each frame op, with a hand-written
// little-endian codec per body (docs/format-peer.md lists every field).
//
// Strings are a u32 length then that many bytes; fixed-size byte arrays
// (nonces, proofs) have no prefix. Every Decode* validates the whole payload:
// truncated fields, strings over their limit, unknown enum values, and
// trailing bytes give Corruption naming the body and field; a well-formed but
// meaningless request (range past the object's end) gives InvalidArgument.
// The decoders never read outside their input, whatever it holds (fuzzed by
// frame_fuzz.cc).
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "granary/status.h"
#include "net/frame.h"
#include "net/peer_service.h"

namespace granary::net {

inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;
using Nonce = std::array<uint8_t, kNonceSize>;
using Mac = std::array<uint8_t, kMacSize>;

// Longest node id, dataset id or etag.
inline constexpr size_t kMaxTokenLength = 1024;
// Longest object key.
inline constexpr size_t kMaxKeyLength = 4096;
// Longest error message; EncodeError truncates longer ones.
inline constexpr size_t kMaxMessageLength = 4096;

// How a node authenticates its peers.
enum class AuthMode : uint8_t {
  kNone = 0,        // insecure: no shared secret; proofs are all zero
  kHmacSha256 = 1,  // shared secret, HMAC-SHA256 challenge-response both ways
};

// kHello.
struct HelloBody {
  uint16_t version = kProtocolVersion;  // the server's protocol version
  AuthMode mode = AuthMode::kNone;      // the server's auth mode
  Nonce server_nonce{};                 // 32 random bytes, fresh per connection
  std::string node_id;                  // the server's node id
  std::string dataset;                  // the dataset id the server serves
  bool operator==(const HelloBody&) const = default;
};

// kAuth.
struct AuthBody {
  AuthMode mode = AuthMode::kNone;  // the client's auth mode
  Nonce client_nonce{};             // 32 random bytes, fresh per connection
  Mac proof{};                      // ClientProof(...) (zero when mode is kNone)
  std::string dataset;              // the dataset id the client serves
  std::string node_id;              // the client's node id (for logs)
  bool operator==(const AuthBody&) const = default;
};

// kAuthOk.
struct AuthOkBody {
  Mac proof{};  // ServerProof(...) (zero when mode is kNone)
  bool operator==(const AuthOkBody&) const = default;
};

// kError.
struct ErrorBody {
  Code code = Code::kInternal;  // never kOk
  std::string message;          // one line, no secrets
  bool operator==(const ErrorBody&) const = default;
};

std::string EncodeHello(const HelloBody& b);
Result<HelloBody> DecodeHello(std::string_view payload);

std::string EncodeAuth(const AuthBody& b);
Result<AuthBody> DecodeAuth(std::string_view payload);

std::string EncodeAuthOk(const AuthOkBody& b);
Result<AuthOkBody> DecodeAuthOk(std::string_view payload);

// kGetBlock / kGetCachedBlock / kWarm. For the block requests the decoder
// also checks the range:
// offset + length <= size, length <= kMaxPayload.
std::string EncodeBlockRequest(const BlockRequest& r);
Result<BlockRequest> DecodeBlockRequest(std::string_view payload, Op op);

// kWarmDone: u8 cached (0 or 1).
std::string EncodeWarmDone(bool cached);
Result<bool> DecodeWarmDone(std::string_view payload);

// kError. A message longer than kMaxMessageLength is cut.
std::string EncodeError(const Status& s);
Result<ErrorBody> DecodeError(std::string_view payload);

// kStatus, kPing, kPong: the body must be empty.
Status DecodeEmpty(std::string_view payload, Op op);

// kBlock and kStatusReply carry their bytes raw (the frame checksum covers
// them); kStatusReply must not be empty.
Status DecodeStatusReply(std::string_view payload);

}  // namespace granary::net
