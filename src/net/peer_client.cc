// PeerClient (see peer_client.h): pooled, pipelined connections to one peer.
#include "net/peer_client.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/log.h"
#include "common/mutex.h"
#include "net/handshake.h"
#include "net/messages.h"

namespace granary::net {

const char* PeerErrorKindName(PeerErrorKind kind) {
  switch (kind) {
    case PeerErrorKind::kConnect: return "connect";
    case PeerErrorKind::kTimeout: return "timeout";
    case PeerErrorKind::kAuth: return "auth";
    case PeerErrorKind::kProtocol: return "protocol";
    case PeerErrorKind::kChecksum: return "checksum";
    case PeerErrorKind::kRemote: return "remote";
    case PeerErrorKind::kConnectionLost: return "connection_lost";
  }
  return "unknown";
}

struct PeerClient::Counters {
  std::atomic<uint64_t> requests{0}, bytes{0}, connects{0}, latency_sum_ns{0};
  std::array<std::atomic<uint64_t>, kPeerErrorKinds> errors{};
  std::array<std::atomic<uint64_t>, kPeerLatencyBuckets> latency{};
};

struct PeerClient::Outcome {
  Result<Frame> frame;
  // A kBlock reply's payload, received straight into its block buffer
  // (frame.payload stays empty).
  BlockData block;
  PeerErrorKind kind = PeerErrorKind::kProtocol;  // meaningful when !frame.ok()
};

struct PeerClient::Slot {
  // Guards opening, conn; never held while connecting. Taken before the
  // slot's Connection::mu_ (asking whether it broke).
  Mutex mu;
  CondVar cv;  // signalled when an open attempt ends
  // A caller is connecting for this slot; others wait for it.
  bool opening GUARDED_BY(mu) = false;
  std::shared_ptr<Connection> conn GUARDED_BY(mu);
};

// One connected, authenticated socket with its reader thread. Errors it
// returns are not yet prefixed with the peer's address.
class PeerClient::Connection {
 public:
  Connection(int fd, FrameDecoder decoder, Counters* counters)
      : fd_(fd), decoder_(std::move(decoder)), counters_(counters) {
    reader_ = std::thread([this] { ReadLoop(); });
  }
  ~Connection() {
    ShutdownSocket(fd_);
    reader_.join();
    ::close(fd_);
  }

  // Sends one request and waits for its reply until `deadline`.
  Outcome Call(Op op, std::string_view payload, Deadline deadline);

  bool broken() {
    MutexLock lock(mu_);
    return !broken_.ok();
  }

 private:
  void ReadLoop();
  // Makes [pos_, end_) of buf_ hold at least `need` (<= buf_.size()) bytes;
  // false if the connection ended first (it is then broken).
  bool Fill(size_t need);
  // False (and the connection broken) when a receive ended the connection.
  bool Received(const Result<size_t>& n);
  // Receives the next frame's payload (header `h`) into `dst`: what buf_
  // holds of it, then the rest straight from the socket.
  bool ReceivePayload(const FrameHeader& h, char* dst);
  // Hands a reply to its caller; false if the connection must end.
  bool Deliver(Frame f, BlockData block) EXCLUDES(mu_);
  // Marks the connection broken and fails every outstanding request.
  void Break(const Status& s, PeerErrorKind kind) EXCLUDES(mu_);

  // Not annotated: it is guarded by its Connection's mu_, which the analysis
  // cannot name from here.
  struct Pending {
    CondVar cv;
    std::optional<Outcome> outcome;  // set once, under mu_
  };

  const int fd_;
  FrameDecoder decoder_;  // the handshake's; its leftover bytes seed buf_
  Counters* counters_;
  // Received bytes not yet consumed: [pos_, end_) of buf_ (reader thread only).
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  // Serializes whole frames on fd_ (guards no member); taken before mu_
  // when both are held.
  Mutex write_mu_ ACQUIRED_BEFORE(mu_);
  Mutex mu_;  // guards pending_, next_id_, broken_; a leaf lock
  std::unordered_map<uint64_t, std::shared_ptr<Pending>> pending_ GUARDED_BY(mu_);
  // 0 is the handshake's and connection-level errors'.
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  Status broken_ GUARDED_BY(mu_);  // why the connection is unusable; OK while it works
  std::thread reader_;
};

PeerClient::Outcome PeerClient::Connection::Call(Op op, std::string_view payload,
                                                 Deadline deadline) {
  auto p = std::make_shared<Pending>();
  uint64_t id;
  {
    MutexLock lock(mu_);
    if (!broken_.ok()) return {.frame = broken_, .kind = PeerErrorKind::kConnectionLost};
    id = next_id_++;
    pending_.emplace(id, p);
  }
  {
    MutexLock lock(write_mu_);
    Status s = WriteFrame(fd_, op, id, payload, deadline);
    // A frame may be half sent: nothing else can follow it on this socket.
    if (!s.ok())
      Break(Unavailable("connection lost: " + s.message()), PeerErrorKind::kConnectionLost);
  }
  MutexLock lock(mu_);
  if (!p->cv.WaitUntil(lock, deadline, [&] { return p->outcome.has_value(); })) {
    pending_.erase(id);
    return {.frame = Unavailable("timed out"), .kind = PeerErrorKind::kTimeout};
  }
  return std::move(*p->outcome);
}

// Replies are received without the decoder's copies: each header is checked
// from the receive buffer, and a block's payload lands in its own aligned
// buffer -- the part already received copied once, the rest read straight
// into it -- and is checksummed there, once.
void PeerClient::Connection::ReadLoop() {
  buf_.resize(256 << 10);
  std::string left = decoder_.TakeBuffered();
  if (left.size() > buf_.size()) buf_.resize(left.size());
  std::memcpy(buf_.data(), left.data(), left.size());
  end_ = left.size();
  for (;;) {
    if (!Fill(kFrameHeaderSize)) return;
    Result<FrameHeader> h = DecodeFrameHeader(buf_.data() + pos_);
    if (!h.ok()) {
      Break(h.status(), PeerErrorKind::kProtocol);
      return;
    }
    pos_ += kFrameHeaderSize;
    Frame f{.op = h->op, .flags = h->flags, .request_id = h->request_id, .payload = {}};
    std::shared_ptr<BlockBuffer> block;
    const char* payload = nullptr;
    if (h->op == Op::kBlock) {
      block = BlockBuffer::Allocate(h->length);
      if (!ReceivePayload(*h, block->data())) return;
      payload = block->data();
    } else {
      f.payload.resize(h->length);
      if (!ReceivePayload(*h, f.payload.data())) return;
      payload = f.payload.data();
    }
    if (PayloadChecksum(std::string_view(payload, h->length)) != h->payload_checksum) {
      Break(Corruption("frame payload checksum mismatch (" + OpName(h->op) + ", " +
                       std::to_string(h->length) + " bytes)"),
            PeerErrorKind::kChecksum);
      return;
    }
    // Verified against this sum just now: the store records it as it is.
    if (block) block->set_xxh3(h->payload_checksum);
    counters_->bytes.fetch_add(kFrameHeaderSize + h->length);
    if (!Deliver(std::move(f), std::move(block))) return;
  }
}

bool PeerClient::Connection::Received(const Result<size_t>& n) {
  if (n.ok() && *n > 0) return true;
  Break(Unavailable("connection lost: " +
                    (n.ok() ? std::string("closed by the peer") : n.status().message())),
        PeerErrorKind::kConnectionLost);
  return false;
}

bool PeerClient::Connection::Fill(size_t need) {
  if (end_ - pos_ >= need) return true;
  if (pos_ > 0) {
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  while (end_ < need) {
    auto n = RecvSome(fd_, buf_.data() + end_, buf_.size() - end_, Deadline::max());
    if (!Received(n)) return false;
    end_ += *n;
  }
  return true;
}

bool PeerClient::Connection::ReceivePayload(const FrameHeader& h, char* dst) {
  const size_t buffered = std::min<size_t>(end_ - pos_, h.length);
  if (buffered > 0) std::memcpy(dst, buf_.data() + pos_, buffered);
  pos_ += buffered;
  if (pos_ == end_) pos_ = end_ = 0;
  for (size_t got = buffered; got < h.length;) {
    auto n = RecvSome(fd_, dst + got, h.length - got, Deadline::max());
    if (!Received(n)) return false;
    got += *n;
  }
  return true;
}

bool PeerClient::Connection::Deliver(Frame f, BlockData block) {
  if (f.request_id == 0) {  // the server is dropping this connection, or broke the protocol
    if (f.op != Op::kError) {
      Break(Corruption("unexpected " + OpName(f.op) + " frame with request id 0"),
            PeerErrorKind::kProtocol);
      return false;
    }
    auto e = DecodeError(f.payload);
    Status s = e.ok() ? Status(e->code, "closed the connection: " + e->message) : e.status();
    Break(s, e.ok() && e->code != Code::kCorruption ? PeerErrorKind::kRemote
                                                    : PeerErrorKind::kProtocol);
    return false;
  }
  MutexLock lock(mu_);
  auto it = pending_.find(f.request_id);
  if (it == pending_.end()) return true;  // its caller timed out and left
  it->second->outcome =
      Outcome{.frame = std::move(f), .block = std::move(block), .kind = PeerErrorKind::kProtocol};
  it->second->cv.NotifyOne();
  pending_.erase(it);
  return true;
}

void PeerClient::Connection::Break(const Status& s, PeerErrorKind kind) {
  {
    MutexLock lock(mu_);
    if (!broken_.ok()) return;
    broken_ = s;
    for (auto& [id, p] : pending_) {
      p->outcome = Outcome{.frame = s, .block = nullptr, .kind = kind};
      p->cv.NotifyOne();
    }
    pending_.clear();
  }
  ShutdownSocket(fd_);  // wakes the reader; the fd closes with the Connection
}

PeerClient::PeerClient(std::string address, PeerClientOptions o)
    : address_(std::move(address)), opts_(std::move(o)), counters_(std::make_unique<Counters>()) {
  for (int i = 0; i < std::max(1, opts_.connections); ++i) {
    slots_.push_back(std::make_unique<Slot>());
  }
}

PeerClient::~PeerClient() = default;

PeerClientStats PeerClient::stats() const {
  const Counters& c = *counters_;
  PeerClientStats s{.requests = c.requests.load(),
                    .bytes_received = c.bytes.load(),
                    .connects = c.connects.load(),
                    .errors = {},
                    .latency_buckets = {},
                    .latency_sum_s = static_cast<double>(c.latency_sum_ns.load()) / 1e9};
  for (size_t i = 0; i < kPeerErrorKinds; ++i) s.errors[i] = c.errors[i].load();
  for (size_t i = 0; i < kPeerLatencyBuckets; ++i) s.latency_buckets[i] = c.latency[i].load();
  return s;
}

void PeerClient::CountError(PeerErrorKind kind) {
  counters_->errors[static_cast<size_t>(kind)].fetch_add(1);
}

void PeerClient::RecordLatency(Deadline start) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Now() - start).count();
  double s = static_cast<double>(ns) / 1e9;
  size_t b = static_cast<size_t>(
      std::lower_bound(kPeerLatencyBounds.begin(), kPeerLatencyBounds.end(), s) -
      kPeerLatencyBounds.begin());
  counters_->latency[b].fetch_add(1);
  counters_->latency_sum_ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(ns, 0)));
}

Result<std::shared_ptr<PeerClient::Connection>> PeerClient::OpenConnection(Deadline deadline) {
  const Deadline start = Now();
  const Deadline until = std::min(deadline, start + opts_.connect_timeout);
  auto budget_ms = [&] {
    return std::to_string(std::chrono::ceil<std::chrono::milliseconds>(until - start).count());
  };
  auto fd = ConnectTcp(address_, until);
  if (!fd.ok()) {
    if (fd.status().message() == "connect timed out") {
      return Unavailable("peer " + address_ + ": connect timed out after " + budget_ms() + " ms");
    }
    return fd.status().WithContext("peer " + address_);
  }
  FrameDecoder decoder;
  AuthConfig self{.secret = opts_.secret, .dataset = opts_.dataset, .node_id = opts_.node_id};
  Status hs = ClientHandshake(*fd, decoder, self, address_, until);
  if (!hs.ok()) {
    ::close(*fd);
    if (hs.code() == Code::kUnavailable && Now() >= until) {
      return Unavailable("peer " + address_ + ": connect timed out after " + budget_ms() +
                         " ms (no handshake)");
    }
    return hs;
  }
  counters_->connects.fetch_add(1);
  return std::make_shared<Connection>(*fd, std::move(decoder), counters_.get());
}

Result<std::shared_ptr<PeerClient::Connection>> PeerClient::Acquire(Deadline deadline,
                                                                    bool* reused) {
  Slot& slot = *slots_[next_slot_.fetch_add(1) % slots_.size()];
  std::shared_ptr<Connection> stale;  // a broken connection, destroyed outside the lock
  {
    MutexLock lock(slot.mu);
    if (!slot.cv.WaitUntil(lock, deadline, [&]() REQUIRES(slot.mu) { return !slot.opening; })) {
      return Unavailable("peer " + address_ + ": timed out waiting for a connection");
    }
    *reused = slot.conn && !slot.conn->broken();
    if (*reused) return slot.conn;
    stale = std::move(slot.conn);
    slot.opening = true;
  }
  stale.reset();
  auto conn = OpenConnection(deadline);
  {
    MutexLock lock(slot.mu);
    slot.opening = false;
    if (conn.ok()) slot.conn = *conn;
  }
  slot.cv.NotifyAll();
  return conn;
}

PeerClient::Outcome PeerClient::CallOnce(Op op, const std::string& payload, Deadline deadline,
                                         bool* reused) {
  auto conn = Acquire(deadline, reused);
  if (!conn.ok()) {
    Code code = conn.status().code();
    PeerErrorKind kind = code == Code::kPermissionDenied || code == Code::kInvalidArgument
                             ? PeerErrorKind::kAuth
                         : code == Code::kCorruption ? PeerErrorKind::kProtocol
                                                     : PeerErrorKind::kConnect;
    return {.frame = conn.status(), .kind = kind};
  }
  Outcome o = (*conn)->Call(op, payload, deadline);
  if (!o.frame.ok()) {
    Status s = o.frame.status();
    if (o.kind == PeerErrorKind::kTimeout) {
      s = Unavailable("request timed out after " + std::to_string(opts_.request_timeout.count()) +
                      " ms");
    }
    o.frame = s.WithContext("peer " + address_);
  }
  return o;
}

Result<std::string> PeerClient::Call(Op op, const std::string& payload, Op expected,
                                     BlockData* block) {
  const Deadline start = Now();
  const Deadline deadline = start + opts_.request_timeout;
  counters_->requests.fetch_add(1);
  bool reused = false;
  Outcome o = CallOnce(op, payload, deadline, &reused);
  if (!o.frame.ok() && o.kind == PeerErrorKind::kConnectionLost && reused && Now() < deadline) {
    GLOG_DEBUG("peer {}: retrying {} on a new connection: {}", address_, OpName(op),
               o.frame.status().ToString());
    o = CallOnce(op, payload, deadline, &reused);
  }
  RecordLatency(start);
  if (!o.frame.ok()) {
    CountError(o.kind);
    return o.frame.status();
  }
  Frame& f = *o.frame;
  if (f.op == Op::kError) {
    auto e = DecodeError(f.payload);
    // "Not held here" is get_cached_block's ordinary answer, not an error.
    if (!e.ok() || op != Op::kGetCachedBlock || e->code != Code::kNotFound) {
      CountError(PeerErrorKind::kRemote);
    }
    if (!e.ok()) return e.status().WithContext("peer " + address_);
    return Status(e->code, "peer " + address_ + ": " + e->message);
  }
  if (f.op != expected) {
    CountError(PeerErrorKind::kProtocol);
    return Corruption("peer " + address_ + ": answered " + OpName(op) + " with " + OpName(f.op));
  }
  if (block != nullptr) *block = std::move(o.block);
  return std::move(f.payload);
}

Result<BlockData> PeerClient::GetBlock(const BlockRequest& r) {
  return BlockCall(Op::kGetBlock, r);
}

Result<BlockData> PeerClient::GetCachedBlock(const BlockRequest& r) {
  return BlockCall(Op::kGetCachedBlock, r);
}

Result<BlockData> PeerClient::BlockCall(Op op, const BlockRequest& r) {
  BlockData block;
  RETURN_IF_ERROR(Call(op, EncodeBlockRequest(r), Op::kBlock, &block).status());
  if (r.length != 0 && block->size() != r.length) {
    CountError(PeerErrorKind::kProtocol);
    return Corruption("peer " + address_ + ": returned " + std::to_string(block->size()) +
                      " bytes for a block of " + std::to_string(r.length));
  }
  return block;
}

Result<bool> PeerClient::Warm(const BlockRequest& r) {
  ASSIGN_OR_RETURN(std::string body, Call(Op::kWarm, EncodeBlockRequest(r), Op::kWarmDone));
  auto cached = DecodeWarmDone(body);
  if (!cached.ok()) {
    CountError(PeerErrorKind::kProtocol);
    return cached.status().WithContext("peer " + address_);
  }
  return *cached;
}

Result<std::string> PeerClient::StatusJson() {
  ASSIGN_OR_RETURN(std::string json, Call(Op::kStatus, "", Op::kStatusReply));
  if (Status s = DecodeStatusReply(json); !s.ok()) {
    CountError(PeerErrorKind::kProtocol);
    return s.WithContext("peer " + address_);
  }
  return json;
}

Status PeerClient::Ping() {
  ASSIGN_OR_RETURN(std::string body, Call(Op::kPing, "", Op::kPong));
  if (Status s = DecodeEmpty(body, Op::kPong); !s.ok()) {
    CountError(PeerErrorKind::kProtocol);
    return s.WithContext("peer " + address_);
  }
  return Status::Ok();
}

}  // namespace granary::net
