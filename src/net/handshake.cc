// Connect-time handshake I/O (see handshake.h).
#include "net/handshake.h"

#include "common/log.h"

namespace granary::net {
namespace {

// The Status a kError frame carries, prefixed with `context`.
Status RemoteError(const Frame& f, std::string_view context) {
  auto body = DecodeError(f.payload);
  if (!body.ok()) return body.status().WithContext(context);
  return Status(body->code, std::string(context) + ": " + body->message);
}

Result<AuthBody> ReadAuth(int fd, FrameDecoder& decoder, Deadline deadline) {
  ASSIGN_OR_RETURN(Frame f, ReadFrame(fd, decoder, deadline));
  if (f.op != Op::kAuth) {
    return Corruption("expected an auth frame, got " + OpName(f.op));
  }
  return DecodeAuth(f.payload);
}

}  // namespace

Result<Frame> ReadFrame(int fd, FrameDecoder& decoder, Deadline deadline) {
  char buf[16384];
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<Frame> f, decoder.Next());
    if (f) return std::move(*f);
    ASSIGN_OR_RETURN(size_t n, RecvSome(fd, buf, sizeof(buf), deadline));
    if (n == 0) return Unavailable("connection closed");
    decoder.Feed(std::string_view(buf, n));
  }
}

Status WriteFrame(int fd, Op op, uint64_t request_id, std::string_view payload, Deadline deadline) {
  std::string header = EncodeFrameHeader(op, 0, request_id, static_cast<uint32_t>(payload.size()),
                                         PayloadChecksum(payload));
  return SendAll(fd, {header, payload}, deadline);
}

ServerHandshakeResult ServerHandshake(int fd, FrameDecoder& decoder, const AuthConfig& self,
                                      std::string_view peer, Deadline deadline) {
  auto nonce = RandomNonce();
  if (!nonce.ok()) return {.failure = HandshakeFailure::kIo, .status = nonce.status()};
  if (Status s = WriteFrame(fd, Op::kHello, 0, EncodeHello(MakeHello(self, *nonce)), deadline);
      !s.ok()) {
    return {.failure = HandshakeFailure::kIo, .status = s};
  }
  auto auth = ReadAuth(fd, decoder, deadline);
  if (!auth.ok()) {
    bool io = auth.status().code() == Code::kUnavailable || auth.status().code() == Code::kIoError;
    return {.failure = io ? HandshakeFailure::kIo : HandshakeFailure::kProtocol,
            .status = auth.status()};
  }
  auto ok = CheckAuth(*auth, self, *nonce, peer);
  if (!ok.ok()) return {.failure = HandshakeFailure::kAuth, .status = ok.status()};
  if (Status s = WriteFrame(fd, Op::kAuthOk, 0, EncodeAuthOk(*ok), deadline); !s.ok()) {
    return {.failure = HandshakeFailure::kIo, .status = s};
  }
  return {.failure = HandshakeFailure::kNone, .status = Status::Ok(), .client_id = auth->node_id};
}

void SendHandshakeRefusal(int fd, const Status& why, Deadline deadline) {
  // Best effort: the connection closes right after, whatever happens here.
  WriteFrame(fd, Op::kError, 0, EncodeError(why), deadline).IgnoreError();
}

Status ClientHandshake(int fd, FrameDecoder& decoder, const AuthConfig& self, std::string_view peer,
                       Deadline deadline) {
  const std::string context = "peer " + std::string(peer);
  const std::string refused = context + " refused the connection";
  auto read = [&]() -> Result<Frame> {
    auto f = ReadFrame(fd, decoder, deadline);
    if (!f.ok()) return f.status().WithContext(context);
    return f;
  };
  ASSIGN_OR_RETURN(Frame hello_frame, read());
  if (hello_frame.op == Op::kError) return RemoteError(hello_frame, refused);
  if (hello_frame.op != Op::kHello) {
    return Corruption(context + ": expected a hello frame, got " + OpName(hello_frame.op));
  }
  auto hello = DecodeHello(hello_frame.payload);
  if (!hello.ok()) return hello.status().WithContext(context);
  ASSIGN_OR_RETURN(Nonce nonce, RandomNonce());
  // Sent even when this node refuses the hello, so the server logs the mismatch too.
  RETURN_IF_ERROR(WriteFrame(fd, Op::kAuth, 0, EncodeAuth(MakeAuth(self, *hello, nonce)), deadline)
                      .WithContext(context));
  RETURN_IF_ERROR(CheckHello(*hello, self, peer));
  ASSIGN_OR_RETURN(Frame reply, read());
  if (reply.op == Op::kError) return RemoteError(reply, refused);
  if (reply.op != Op::kAuthOk) {
    return Corruption(context + ": expected an auth_ok frame, got " + OpName(reply.op));
  }
  auto ok = DecodeAuthOk(reply.payload);
  if (!ok.ok()) return ok.status().WithContext(context);
  return CheckAuthOk(*ok, self, *hello, nonce, peer);
}

}  // namespace granary::net
