// Body codecs (see messages.h).
#include "net/messages.h"

#include <cstring>

#include "net/wire.h"

namespace granary::net {
namespace {

// Sequential reader over one body; every read names its field for errors.
class BodyReader {
 public:
  BodyReader(std::string_view data, std::string body) : data_(data), body_(std::move(body)) {}

  Result<uint64_t> Int(std::string_view field, size_t bytes) {
    RETURN_IF_ERROR(Need(field, bytes));
    uint64_t v = wire::GetLE(data_.data() + pos_, bytes);
    pos_ += bytes;
    return v;
  }

  Result<std::string> Str(std::string_view field, size_t max) {
    ASSIGN_OR_RETURN(uint64_t len, Int(field, 4));
    if (len > max) {
      return Corruption(Where(field) + "length " + std::to_string(len) + " over the limit of " +
                        std::to_string(max));
    }
    RETURN_IF_ERROR(Need(field, len));
    std::string s(data_.substr(pos_, len));
    pos_ += len;
    return s;
  }

  template <size_t N>
  Status Fixed(std::string_view field, std::array<uint8_t, N>& out) {
    RETURN_IF_ERROR(Need(field, N));
    std::memcpy(out.data(), data_.data() + pos_, N);
    pos_ += N;
    return Status::Ok();
  }

  // Fails if bytes remain after the last field.
  Status Finish() const {
    if (pos_ == data_.size()) return Status::Ok();
    return Corruption(body_ + " body: " + std::to_string(data_.size() - pos_) + " trailing bytes");
  }

  std::string Where(std::string_view field) const {
    return body_ + " body: field '" + std::string(field) + "' ";
  }

 private:
  Status Need(std::string_view field, uint64_t n) const {
    if (n <= data_.size() - pos_) return Status::Ok();
    return Corruption(Where(field) + "truncated (needs " + std::to_string(n) + " bytes, " +
                      std::to_string(data_.size() - pos_) + " left)");
  }

  std::string_view data_;
  std::string body_;  // owned: callers may pass a temporary name
  size_t pos_ = 0;
};

void PutStr(std::string& out, std::string_view s) {
  wire::PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

template <size_t N>
void PutFixed(std::string& out, const std::array<uint8_t, N>& a) {
  out.append(reinterpret_cast<const char*>(a.data()), N);
}

Result<AuthMode> ReadMode(BodyReader& r) {
  ASSIGN_OR_RETURN(uint64_t m, r.Int("auth_mode", 1));
  if (m > static_cast<uint64_t>(AuthMode::kHmacSha256)) {
    return Corruption(r.Where("auth_mode") + "unknown value " + std::to_string(m));
  }
  return static_cast<AuthMode>(m);
}

}  // namespace

std::string EncodeHello(const HelloBody& b) {
  std::string out;
  wire::PutU16(out, b.version);
  wire::PutU8(out, static_cast<uint8_t>(b.mode));
  PutFixed(out, b.server_nonce);
  PutStr(out, b.node_id);
  PutStr(out, b.dataset);
  return out;
}

Result<HelloBody> DecodeHello(std::string_view payload) {
  BodyReader r(payload, "hello");
  HelloBody b;
  ASSIGN_OR_RETURN(uint64_t version, r.Int("version", 2));
  b.version = static_cast<uint16_t>(version);
  ASSIGN_OR_RETURN(b.mode, ReadMode(r));
  RETURN_IF_ERROR(r.Fixed("server_nonce", b.server_nonce));
  ASSIGN_OR_RETURN(b.node_id, r.Str("node_id", kMaxTokenLength));
  ASSIGN_OR_RETURN(b.dataset, r.Str("dataset", kMaxTokenLength));
  RETURN_IF_ERROR(r.Finish());
  return b;
}

std::string EncodeAuth(const AuthBody& b) {
  std::string out;
  wire::PutU8(out, static_cast<uint8_t>(b.mode));
  PutFixed(out, b.client_nonce);
  PutFixed(out, b.proof);
  PutStr(out, b.dataset);
  PutStr(out, b.node_id);
  return out;
}

Result<AuthBody> DecodeAuth(std::string_view payload) {
  BodyReader r(payload, "auth");
  AuthBody b;
  ASSIGN_OR_RETURN(b.mode, ReadMode(r));
  RETURN_IF_ERROR(r.Fixed("client_nonce", b.client_nonce));
  RETURN_IF_ERROR(r.Fixed("proof", b.proof));
  ASSIGN_OR_RETURN(b.dataset, r.Str("dataset", kMaxTokenLength));
  ASSIGN_OR_RETURN(b.node_id, r.Str("node_id", kMaxTokenLength));
  RETURN_IF_ERROR(r.Finish());
  return b;
}

std::string EncodeAuthOk(const AuthOkBody& b) {
  std::string out;
  PutFixed(out, b.proof);
  return out;
}

Result<AuthOkBody> DecodeAuthOk(std::string_view payload) {
  BodyReader r(payload, "auth_ok");
  AuthOkBody b;
  RETURN_IF_ERROR(r.Fixed("proof", b.proof));
  RETURN_IF_ERROR(r.Finish());
  return b;
}

std::string EncodeBlockRequest(const BlockRequest& q) {
  std::string out;
  PutStr(out, q.dataset);
  PutStr(out, q.key);
  PutStr(out, q.etag);
  wire::PutU64(out, q.size);
  wire::PutU64(out, q.block);
  wire::PutU64(out, q.offset);
  wire::PutU64(out, q.length);
  return out;
}

Result<BlockRequest> DecodeBlockRequest(std::string_view payload, Op op) {
  BodyReader r(payload, OpName(op));
  BlockRequest q;
  ASSIGN_OR_RETURN(q.dataset, r.Str("dataset", kMaxTokenLength));
  ASSIGN_OR_RETURN(q.key, r.Str("key", kMaxKeyLength));
  ASSIGN_OR_RETURN(q.etag, r.Str("etag", kMaxTokenLength));
  ASSIGN_OR_RETURN(q.size, r.Int("size", 8));
  ASSIGN_OR_RETURN(q.block, r.Int("block", 8));
  ASSIGN_OR_RETURN(q.offset, r.Int("offset", 8));
  ASSIGN_OR_RETURN(q.length, r.Int("length", 8));
  RETURN_IF_ERROR(r.Finish());
  if (q.key.empty()) return InvalidArgument(OpName(op) + " request: empty key");
  if (op == Op::kGetBlock || op == Op::kGetCachedBlock) {
    if (q.length > kMaxPayload) {
      return InvalidArgument(OpName(op) + " request: length " + std::to_string(q.length) +
                             " over the frame limit of " + std::to_string(kMaxPayload));
    }
    if (q.offset > q.size || q.length > q.size - q.offset) {
      return InvalidArgument(OpName(op) + " request: range " + std::to_string(q.offset) + "+" +
                             std::to_string(q.length) + " past the object's size " +
                             std::to_string(q.size));
    }
  }
  return q;
}

std::string EncodeWarmDone(bool cached) { return std::string(1, cached ? '\1' : '\0'); }

Result<bool> DecodeWarmDone(std::string_view payload) {
  BodyReader r(payload, "warm_done");
  ASSIGN_OR_RETURN(uint64_t cached, r.Int("cached", 1));
  if (cached > 1) return Corruption(r.Where("cached") + "not 0 or 1: " + std::to_string(cached));
  RETURN_IF_ERROR(r.Finish());
  return cached == 1;
}

std::string EncodeError(const Status& s) {
  std::string out;
  wire::PutU32(out, static_cast<uint32_t>(s.code()));
  PutStr(out, std::string_view(s.message()).substr(0, kMaxMessageLength));
  return out;
}

Result<ErrorBody> DecodeError(std::string_view payload) {
  BodyReader r(payload, "error");
  ErrorBody b;
  ASSIGN_OR_RETURN(uint64_t code, r.Int("code", 4));
  if (code == 0 || code > static_cast<uint64_t>(Code::kStale)) {
    return Corruption(r.Where("code") + "not an error code: " + std::to_string(code));
  }
  b.code = static_cast<Code>(code);
  ASSIGN_OR_RETURN(b.message, r.Str("message", kMaxMessageLength));
  // A Status message is one line (status.h); a peer's never holds a control
  // character, so one that does is not from a Granary peer.
  for (const char c : b.message) {
    if (IsControlChar(c)) {
      return Corruption(r.Where("message") + "control character (byte " +
                        std::to_string(static_cast<unsigned char>(c)) + ")");
    }
  }
  RETURN_IF_ERROR(r.Finish());
  return b;
}

Status DecodeEmpty(std::string_view payload, Op op) {
  if (payload.empty()) return Status::Ok();
  return Corruption(OpName(op) + " body: expected empty, got " + std::to_string(payload.size()) +
                    " bytes");
}

Status DecodeStatusReply(std::string_view payload) {
  if (!payload.empty()) return Status::Ok();
  return Corruption("status_reply body: empty");
}

}  // namespace granary::net
