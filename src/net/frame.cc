// Frame header encoding and the incremental FrameDecoder (see frame.h).
#include "net/frame.h"

#include <xxhash.h>

#include "net/wire.h"

namespace granary::net {
namespace {

// Offsets inside the header (docs/format-peer.md).
constexpr size_t kOffVersion = 4;
constexpr size_t kOffOp = 5;
constexpr size_t kOffFlags = 6;
constexpr size_t kOffRequestId = 8;
constexpr size_t kOffLength = 16;
constexpr size_t kOffPayloadSum = 20;
constexpr size_t kOffHeaderSum = 28;

uint32_t HeaderChecksum(const char* header) {
  return static_cast<uint32_t>(XXH3_64bits(header, kOffHeaderSum));
}

std::string Hex(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "0x";
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    int d = static_cast<int>((v >> shift) & 0xf);
    if (d != 0 || started || shift == 0) {
      out.push_back(kDigits[d]);
      started = true;
    }
  }
  return out;
}

Status BadVersion(uint8_t version) {
  return Corruption("unsupported peer protocol version " + std::to_string(version) +
                    " (this node speaks version " + std::to_string(kProtocolVersion) + ")");
}

}  // namespace

std::string OpName(Op op) {
  switch (op) {
    case Op::kHello: return "hello";
    case Op::kAuth: return "auth";
    case Op::kAuthOk: return "auth_ok";
    case Op::kGetBlock: return "get_block";
    case Op::kBlock: return "block";
    case Op::kWarm: return "warm";
    case Op::kWarmDone: return "warm_done";
    case Op::kStatus: return "status";
    case Op::kStatusReply: return "status_reply";
    case Op::kError: return "error";
    case Op::kPing: return "ping";
    case Op::kPong: return "pong";
    case Op::kGetCachedBlock: return "get_cached_block";
  }
  return "op_" + std::to_string(static_cast<int>(op));
}

bool IsKnownOp(uint8_t op) { return op >= 1 && op < kOpSlots; }

uint64_t PayloadChecksum(std::string_view payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

std::string EncodeFrameHeader(Op op, uint16_t flags, uint64_t request_id, uint32_t length,
                              uint64_t checksum) {
  std::string h;
  h.reserve(kFrameHeaderSize);
  wire::PutU32(h, kFrameMagic);
  wire::PutU8(h, kProtocolVersion);
  wire::PutU8(h, static_cast<uint8_t>(op));
  wire::PutU16(h, flags);
  wire::PutU64(h, request_id);
  wire::PutU32(h, length);
  wire::PutU64(h, checksum);
  wire::PutU32(h, HeaderChecksum(h.data()));
  return h;
}

std::string EncodeFrame(Op op, uint64_t request_id, std::string_view payload) {
  std::string f = EncodeFrameHeader(op, 0, request_id, static_cast<uint32_t>(payload.size()),
                                    PayloadChecksum(payload));
  f.append(payload);
  return f;
}

void FrameDecoder::Feed(std::string_view bytes) {
  if (!error_.ok()) return;
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {  // compact: keep the buffer from growing forever
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(bytes);
}

Status FrameDecoder::Fail(Status s) {
  error_ = std::move(s);
  buf_.clear();
  pos_ = 0;
  return error_;
}

Result<FrameHeader> DecodeFrameHeader(const char* h, uint32_t max_payload) {
  if (wire::GetU32(h) != kFrameMagic) {
    return Corruption("bad frame magic " + Hex(wire::GetU32(h)) + " (expected \"GRNY\")");
  }
  if (static_cast<uint8_t>(h[kOffVersion]) != kProtocolVersion) {
    return BadVersion(static_cast<uint8_t>(h[kOffVersion]));
  }
  if (wire::GetU32(h + kOffHeaderSum) != HeaderChecksum(h)) {
    return Corruption("frame header checksum mismatch");
  }
  const uint32_t length = wire::GetU32(h + kOffLength);
  if (length > max_payload) {
    return Corruption("frame payload length " + std::to_string(length) + " over the limit of " +
                      std::to_string(max_payload) + " bytes");
  }
  const uint8_t op = static_cast<uint8_t>(h[kOffOp]);
  if (!IsKnownOp(op)) return Corruption("unknown frame op " + std::to_string(op));
  const uint16_t flags = wire::GetU16(h + kOffFlags);
  if (flags != 0) return Corruption("reserved frame flags set: " + Hex(flags));
  return FrameHeader{.op = static_cast<Op>(op),
                     .flags = flags,
                     .request_id = wire::GetU64(h + kOffRequestId),
                     .length = length,
                     .payload_checksum = wire::GetU64(h + kOffPayloadSum)};
}

std::string FrameDecoder::TakeBuffered() {
  std::string rest = buf_.substr(pos_);
  buf_.clear();
  pos_ = 0;
  return rest;
}

Result<std::optional<Frame>> FrameDecoder::Next() {
  if (!error_.ok()) return error_;
  const size_t avail = buf_.size() - pos_;
  const char* h = buf_.data() + pos_;
  // Magic and version are checked as soon as they arrive: a peer speaking
  // something else is told so without waiting for a whole header.
  if (avail >= 4 && wire::GetU32(h) != kFrameMagic) {
    return Fail(Corruption("bad frame magic " + Hex(wire::GetU32(h)) + " (expected \"GRNY\")"));
  }
  if (avail > kOffVersion && static_cast<uint8_t>(h[kOffVersion]) != kProtocolVersion) {
    return Fail(BadVersion(static_cast<uint8_t>(h[kOffVersion])));
  }
  if (avail < kFrameHeaderSize) return std::optional<Frame>();
  Result<FrameHeader> header = DecodeFrameHeader(h, max_payload_);
  if (!header.ok()) return Fail(header.status());
  if (avail < kFrameHeaderSize + header->length) return std::optional<Frame>();

  std::string_view payload(h + kFrameHeaderSize, header->length);
  if (PayloadChecksum(payload) != header->payload_checksum) {
    checksum_failed_ = true;
    return Fail(Corruption("frame payload checksum mismatch (" + OpName(header->op) + ", " +
                           std::to_string(header->length) + " bytes)"));
  }
  Frame f{.op = header->op,
          .flags = header->flags,
          .request_id = header->request_id,
          .payload = std::string(payload)};
  pos_ += kFrameHeaderSize + header->length;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return std::optional<Frame>(std::move(f));
}

}  // namespace granary::net
