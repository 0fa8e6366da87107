// Peer protocol frames: the fixed 32-byte header, frame encoding, and an
// incremental decoder (docs/format-peer.md gives the layout byte by byte).
//
// Every frame is a header followed by `payload_length` payload bytes. The
// header carries its own checksum (low 32 bits of XXH3-64 over its first 28
// bytes) and the payload's XXH3-64, so a frame is either delivered intact or
// rejected; nothing partially validated reaches a body decoder.
//
// Invariants: all integers are little-endian; `magic` and `version` keep their
// offsets in every future version, so any node can tell which version a peer
// speaks; payloads never exceed the decoder's limit (kMaxPayload by default).
//
// Thread safety: free functions are thread-safe; a FrameDecoder is not (one
// per connection, used by its reading thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary::net {

// "GRNY" as it appears on the wire (bytes 'G' 'R' 'N' 'Y'), read as a little-endian u32.
inline constexpr uint32_t kFrameMagic = 0x594E5247;
// The only protocol version this build speaks.
inline constexpr uint8_t kProtocolVersion = 2;
// Bytes in a frame header.
inline constexpr size_t kFrameHeaderSize = 32;
// Largest payload a frame may carry (64 MiB): one block plus nothing else.
inline constexpr uint32_t kMaxPayload = 64u << 20;

// The operation a frame carries. Values are wire values; never renumber.
enum class Op : uint8_t {
  kHello = 1,     // server → client at connect: version, auth mode, server nonce, node, dataset
  kAuth = 2,      // client → server: auth mode, client nonce, client proof, dataset, node
  kAuthOk = 3,    // server → client: server proof; the connection is open for requests
  kGetBlock = 4,  // client → server: read one block (BlockRequest)
  kBlock = 5,     // server → client: the block's bytes (the raw payload)
  kWarm = 6,      // client → server: cache a whole object here (BlockRequest)
  kWarmDone = 7,  // server → client: warm finished; u8 cached flag
  kStatus = 8,    // client → server: ask for this node's status (empty body)
  kStatusReply = 9,      // server → client: status JSON text (the raw payload)
  kError = 10,           // either way: a request (or the handshake) failed: Code + message
  kPing = 11,            // client → server: liveness probe (empty body)
  kPong = 12,            // server → client: answer to kPing (empty body)
  kGetCachedBlock = 13,  // client → server: one block only if the server holds it (BlockRequest);
                         // never fetched for it: NotFound otherwise (a handover's request)
};
// One past the largest Op value: the size of per-op counter arrays.
inline constexpr size_t kOpSlots = 14;

// "get_block" style name, or "op_<n>" for an unknown value.
std::string OpName(Op op);
// True for the values listed in Op.
bool IsKnownOp(uint8_t op);

// One decoded frame. request_id 0 is used by the handshake and by connection-level errors.
struct Frame {
  Op op = Op::kPing;
  uint16_t flags = 0;       // reserved: 0 in version 1
  uint64_t request_id = 0;  // matches a reply to its request
  std::string payload;      // the body, already checksum-verified
};

// A frame header, decoded and checked: everything but the payload checksum,
// which needs the payload.
struct FrameHeader {
  Op op = Op::kPing;
  uint16_t flags = 0;
  uint64_t request_id = 0;
  uint32_t length = 0;            // payload bytes that follow the header
  uint64_t payload_checksum = 0;  // XXH3-64 the payload must have
};

// Decodes the kFrameHeaderSize bytes at `header` and checks them: magic,
// version, header checksum, length <= max_payload, a known op, reserved
// flags. Corruption names the check that failed. What FrameDecoder checks,
// for a reader that receives payloads straight into their own buffers.
Result<FrameHeader> DecodeFrameHeader(const char* header, uint32_t max_payload = kMaxPayload);

// XXH3-64 of a payload (the header's payload checksum).
uint64_t PayloadChecksum(std::string_view payload);

// The 32-byte header for a payload of `length` bytes whose checksum is `checksum`.
std::string EncodeFrameHeader(Op op, uint16_t flags, uint64_t request_id, uint32_t length,
                              uint64_t checksum);

// Header + payload. Caller must keep payload.size() <= kMaxPayload.
std::string EncodeFrame(Op op, uint64_t request_id, std::string_view payload);

// Incremental frame decoder. Feed() bytes as they arrive, then call Next()
// until it returns nullopt (needs more bytes). Errors are Corruption with a
// message naming the check that failed (bad magic, unsupported version,
// header checksum, length over limit, unknown op, reserved flags, payload
// checksum); after an error the decoder is poisoned: every later Next()
// returns the same error, and the connection must be dropped.
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_payload = kMaxPayload) : max_payload_(max_payload) {}

  void Feed(std::string_view bytes);
  Result<std::optional<Frame>> Next();

  // Bytes fed but not yet returned in a frame.
  size_t buffered() const { return buf_.size() - pos_; }
  // True while a frame has started arriving but is not complete.
  bool mid_frame() const { return buffered() > 0; }
  // Whether the last error came from a payload checksum mismatch.
  bool payload_checksum_failed() const { return checksum_failed_; }
  // Removes and returns the bytes fed but not yet returned in a frame (for
  // a reader that goes on without the decoder, e.g. after the handshake).
  std::string TakeBuffered();

 private:
  Status Fail(Status s);

  uint32_t max_payload_;
  std::string buf_;
  size_t pos_ = 0;  // start of the first unreturned byte in buf_
  Status error_;    // sticky
  bool checksum_failed_ = false;
};

}  // namespace granary::net
