// PeerServer (see peer_server.h): acceptor, per-connection readers, worker dispatch.
#include "net/peer_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <list>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/thread_pool.h"
#include "net/handshake.h"
#include "net/messages.h"
#include "net/socket.h"

namespace granary::net {
namespace {

// One accepted connection. Shared by its reader thread and the worker tasks
// answering its requests; the socket closes when the last of them lets go.
struct ServerConn {
  ServerConn(int f, std::string p) : fd(f), peer(std::move(p)) {}
  ~ServerConn() { ::close(fd); }

  const int fd;
  const std::string peer;
  Mutex write_mu;  // serializes whole frames on fd (guards no member); never held with mu
  Mutex mu;        // guards in_flight, closing; a leaf lock
  CondVar cv;      // signalled when in_flight drops or closing is set
  int in_flight GUARDED_BY(mu) = 0;     // requests queued or running
  bool closing GUARDED_BY(mu) = false;  // the server is stopping: the reader must not wait
  std::atomic<bool> done{false};        // the reader has finished

  void Release() {
    {
      MutexLock lock(mu);
      --in_flight;
    }
    cv.NotifyAll();
  }
};

struct Counters {
  std::atomic<uint64_t> accepted{0}, refused{0}, open{0}, auth_failures{0}, protocol_errors{0},
      busy{0}, service_errors{0}, bytes_sent{0};
  std::array<std::atomic<uint64_t>, kOpSlots> by_op{};
};

// Closes an fd handed over by the service, whatever path the reply takes.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// XXH3-64 of [offset, offset+length) of fd, read through a read-only mapping.
Result<uint64_t> ChecksumFileRange(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return PayloadChecksum({});
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset - offset % page;
  const size_t map_len = static_cast<size_t>(length + (offset - start));
  void* m = ::mmap(nullptr, map_len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (m == MAP_FAILED) return ErrnoStatus("peer server: mmap of a block file", errno);
  uint64_t sum = XXH3_64bits(static_cast<const char*>(m) + (offset - start), length);
  ::munmap(m, map_len);
  return sum;
}

}  // namespace

struct PeerServer::State {
  PeerServerOptions opts;
  AuthConfig auth;
  PeerService* service = nullptr;
  int listen_fd = -1;
  int wake_fd = -1;  // eventfd: readers that finished, or Stop
  std::string address;
  Counters c;
  std::unique_ptr<ThreadPool> workers;

  struct Entry {
    std::shared_ptr<ServerConn> conn;
    std::thread reader;
  };
  Mutex conns_mu;  // guards conns, stopping; taken before any ServerConn lock
  std::list<Entry> conns GUARDED_BY(conns_mu);
  bool stopping GUARDED_BY(conns_mu) = false;
  std::thread acceptor;

  void Wake() {
    uint64_t one = 1;
    if (::write(wake_fd, &one, sizeof(one)) < 0) GLOG_WARN("peer server: wake failed");
  }
  void AcceptLoop();
  void Admit(int fd, std::string peer);
  void Reap();
  void Serve(const std::shared_ptr<ServerConn>& conn);
  void ReadRequests(const std::shared_ptr<ServerConn>& conn, FrameDecoder& decoder);
  bool Dispatch(const std::shared_ptr<ServerConn>& conn, Frame f);
  void Handle(ServerConn& conn, const Frame& f);
  Status HandleGetBlock(ServerConn& conn, const Frame& f);
  Status HandleWarm(ServerConn& conn, const Frame& f);
  Status HandleStatus(ServerConn& conn, const Frame& f);
  Status SendFileBlock(ServerConn& conn, uint64_t id, const BlockPayload& p);
  void Reply(ServerConn& conn, Op op, uint64_t id, std::string_view payload);
  Result<BlockRequest> DecodeRequest(const Frame& f);
};

Status PeerServerOptions::Validate() const {
  auto bad = [](const std::string& m) { return InvalidArgument("peer server options: " + m); };
  RETURN_IF_ERROR(SplitHostPort(listen, "peer listen address"));
  if (dataset.empty()) return bad("dataset is required");
  if (dataset.size() > kMaxTokenLength || node_id.size() > kMaxTokenLength) {
    return bad("dataset and node_id must be at most " + std::to_string(kMaxTokenLength) + " bytes");
  }
  if (io_timeout.count() <= 0) return bad("io_timeout must be positive");
  if (max_connections < 1) return bad("max_connections must be at least 1");
  if (worker_threads < 1) return bad("worker_threads must be at least 1");
  if (max_queued_requests < 1) return bad("max_queued_requests must be at least 1");
  return Status::Ok();
}

Result<std::unique_ptr<PeerServer>> PeerServer::Start(PeerServerOptions o, PeerService* service) {
  RETURN_IF_ERROR(o.Validate());
  if (service == nullptr) return InvalidArgument("peer server: no service");
  auto st = std::make_unique<State>();
  ASSIGN_OR_RETURN(st->listen_fd, ListenTcp(o.listen, 512, &st->address));
  st->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (st->wake_fd < 0) {
    ::close(st->listen_fd);
    return ErrnoStatus("peer server: eventfd", errno);
  }
  if (o.node_id.empty()) o.node_id = st->address;
  st->auth = AuthConfig{.secret = o.secret, .dataset = o.dataset, .node_id = o.node_id};
  st->service = service;
  // A bounded queue: a flood of requests gets quick "busy" answers, not memory.
  st->workers =
      std::make_unique<ThreadPool>(o.worker_threads, "granary-peer",
                                   std::max<size_t>(1, static_cast<size_t>(o.max_queued_requests)));
  st->opts = std::move(o);
  st->acceptor = std::thread([s = st.get()] { s->AcceptLoop(); });
  GLOG_INFO("peer server: serving dataset {} on {} ({})", st->auth.dataset, st->address,
            st->auth.mode() == AuthMode::kNone ? "insecure: no shared secret" : "shared secret");
  return std::unique_ptr<PeerServer>(new PeerServer(std::move(st)));
}

PeerServer::PeerServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

PeerServer::~PeerServer() {
  State& s = *state_;
  {
    MutexLock lock(s.conns_mu);
    s.stopping = true;
  }
  s.Wake();
  s.acceptor.join();
  std::list<State::Entry> conns;
  {
    MutexLock lock(s.conns_mu);
    conns.swap(s.conns);
  }
  for (auto& e : conns) {
    ShutdownSocket(e.conn->fd);
    {
      MutexLock lock(e.conn->mu);
      e.conn->closing = true;
    }
    e.conn->cv.NotifyAll();
  }
  for (auto& e : conns) e.reader.join();
  s.workers->Stop(ThreadPool::QueuedTasks::kDrop);  // waits for running service calls
  ::close(s.listen_fd);
  ::close(s.wake_fd);
}

std::string PeerServer::address() const { return state_->address; }

PeerServerStats PeerServer::stats() const {
  const Counters& c = state_->c;
  PeerServerStats s{.connections_accepted = c.accepted.load(),
                    .connections_refused = c.refused.load(),
                    .connections_open = c.open.load(),
                    .auth_failures = c.auth_failures.load(),
                    .protocol_errors = c.protocol_errors.load(),
                    .busy_rejections = c.busy.load(),
                    .service_errors = c.service_errors.load(),
                    .requests_by_op = {},
                    .bytes_sent = c.bytes_sent.load()};
  for (size_t i = 0; i < kOpSlots; ++i) s.requests_by_op[i] = c.by_op[i].load();
  return s;
}

void PeerServer::State::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{.fd = listen_fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      GLOG_ERROR("peer server {}: poll failed: {}", address, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) {
      uint64_t n;
      if (::read(wake_fd, &n, sizeof(n)) < 0) n = 0;
      Reap();
      MutexLock lock(conns_mu);
      if (stopping) return;
    }
    if (fds[0].revents == 0) continue;
    std::string peer;
    for (int fd; (fd = AcceptTcp(listen_fd, &peer)) >= 0;) Admit(fd, std::move(peer));
  }
}

void PeerServer::State::Reap() {
  std::list<Entry> finished;
  {
    MutexLock lock(conns_mu);
    for (auto it = conns.begin(); it != conns.end();) {
      auto next = std::next(it);
      if (it->conn->done.load()) finished.splice(finished.end(), conns, it);
      it = next;
    }
  }
  for (auto& e : finished) e.reader.join();
}

void PeerServer::State::Admit(int fd, std::string peer) {
  Reap();
  MutexLock lock(conns_mu);
  if (stopping || conns.size() >= static_cast<size_t>(opts.max_connections)) {
    c.refused.fetch_add(1);
    GLOG_WARN("peer server {}: refusing {}: {} connections open (max_connections)", address, peer,
              conns.size());
    Status busy = Unavailable("too many peer connections (" + std::to_string(conns.size()) + ")");
    WriteFrame(fd, Op::kError, 0, EncodeError(busy), Now()).IgnoreError();
    ::close(fd);
    return;
  }
  c.accepted.fetch_add(1);
  auto conn = std::make_shared<ServerConn>(fd, std::move(peer));
  conns.push_back(Entry{.conn = conn, .reader = std::thread([this, conn] { Serve(conn); })});
}

void PeerServer::State::Serve(const std::shared_ptr<ServerConn>& conn) {
  c.open.fetch_add(1);
  FrameDecoder decoder;
  auto hs = ServerHandshake(conn->fd, decoder, auth, conn->peer, After(opts.io_timeout));
  switch (hs.failure) {
    case HandshakeFailure::kNone:
      GLOG_DEBUG("peer server {}: {} ({}) connected", address, conn->peer, hs.client_id);
      ReadRequests(conn, decoder);
      break;
    case HandshakeFailure::kAuth:
      c.auth_failures.fetch_add(1);
      GLOG_WARN("peer server {}: refused {}: {}", address, conn->peer, hs.status.ToString());
      SendHandshakeRefusal(conn->fd, hs.status, After(opts.io_timeout));
      break;
    case HandshakeFailure::kProtocol:
      c.protocol_errors.fetch_add(1);
      GLOG_WARN("peer server {}: dropped {} during the handshake: {}", address, conn->peer,
                hs.status.ToString());
      break;
    case HandshakeFailure::kIo:
      GLOG_DEBUG("peer server {}: {} left during the handshake: {}", address, conn->peer,
                 hs.status.ToString());
      break;
  }
  ShutdownSocket(conn->fd);
  c.open.fetch_sub(1);
  conn->done.store(true);
  Wake();
}

void PeerServer::State::ReadRequests(const std::shared_ptr<ServerConn>& conn,
                                     FrameDecoder& decoder) {
  std::vector<char> buf(256 << 10);
  Deadline stall = Deadline::max();  // set while a frame is partly received
  for (;;) {
    {
      MutexLock lock(conn->mu);
      conn->cv.Wait(lock, [&]() REQUIRES(conn->mu) {
        return conn->closing || conn->in_flight < kMaxInFlightPerConnection;
      });
      if (conn->closing) return;
    }
    for (;;) {
      auto f = decoder.Next();
      if (!f.ok()) {
        c.protocol_errors.fetch_add(1);
        GLOG_WARN("peer server {}: dropping {}: {}", address, conn->peer, f.status().ToString());
        Reply(*conn, Op::kError, 0, EncodeError(f.status()));
        return;
      }
      if (!*f) break;
      if (!Dispatch(conn, std::move(**f))) return;
    }
    stall = decoder.mid_frame() ? After(opts.io_timeout) : Deadline::max();
    auto n = RecvSome(conn->fd, buf.data(), buf.size(), stall);
    if (!n.ok() || *n == 0) {
      if (!n.ok() && stall != Deadline::max()) {
        GLOG_INFO("peer server {}: dropping {}: a frame stalled for {} ms", address, conn->peer,
                  opts.io_timeout.count());
      }
      return;
    }
    decoder.Feed(std::string_view(buf.data(), *n));
  }
}

bool PeerServer::State::Dispatch(const std::shared_ptr<ServerConn>& conn, Frame f) {
  if (f.op != Op::kGetBlock && f.op != Op::kGetCachedBlock && f.op != Op::kWarm &&
      f.op != Op::kStatus && f.op != Op::kPing) {
    c.protocol_errors.fetch_add(1);
    Status s = Corruption("unexpected " + OpName(f.op) + " frame from a client");
    GLOG_WARN("peer server {}: dropping {}: {}", address, conn->peer, s.ToString());
    Reply(*conn, Op::kError, 0, EncodeError(s));
    return false;
  }
  c.by_op[static_cast<size_t>(f.op)].fetch_add(1);
  if (f.op == Op::kPing) {
    Status s = DecodeEmpty(f.payload, f.op);
    Reply(*conn, s.ok() ? Op::kPong : Op::kError, f.request_id, s.ok() ? "" : EncodeError(s));
    return true;
  }
  {
    MutexLock lock(conn->mu);
    ++conn->in_flight;
  }
  const uint64_t id = f.request_id;
  if (!workers->TrySubmit([this, conn, f = std::move(f)] {
        Handle(*conn, f);
        conn->Release();
      })) {
    conn->Release();
    c.busy.fetch_add(1);
    Reply(*conn, Op::kError, id,
          EncodeError(Unavailable("peer " + address + " is busy: " +
                                  std::to_string(opts.max_queued_requests) + " requests queued")));
  }
  return true;
}

void PeerServer::State::Handle(ServerConn& conn, const Frame& f) {
  Status s;
  switch (f.op) {
    case Op::kGetBlock:
    case Op::kGetCachedBlock: s = HandleGetBlock(conn, f); break;
    case Op::kWarm: s = HandleWarm(conn, f); break;
    default: s = HandleStatus(conn, f); break;
  }
  if (s.ok()) return;
  if (s.code() == Code::kCorruption) {
    c.protocol_errors.fetch_add(1);
  } else {
    c.service_errors.fetch_add(1);
  }
  GLOG_DEBUG("peer server {}: {} request {} from {}: {}", address, OpName(f.op), f.request_id,
             conn.peer, s.ToString());
  Reply(conn, Op::kError, f.request_id, EncodeError(s));
}

Result<BlockRequest> PeerServer::State::DecodeRequest(const Frame& f) {
  ASSIGN_OR_RETURN(BlockRequest r, DecodeBlockRequest(f.payload, f.op));
  if (r.dataset != auth.dataset) {
    return InvalidArgument("peer " + address + " serves dataset " + auth.dataset + ", not " +
                           r.dataset);
  }
  return r;
}

Status PeerServer::State::HandleGetBlock(ServerConn& conn, const Frame& f) {
  ASSIGN_OR_RETURN(BlockRequest r, DecodeRequest(f));
  ASSIGN_OR_RETURN(BlockPayload p,
                   f.op == Op::kGetCachedBlock ? service->GetCachedBlock(r) : service->GetBlock(r));
  if (p.bytes) {
    FdGuard unused{p.fd};
    if (p.bytes->size() > kMaxPayload) {
      return Internal("block of " + std::to_string(p.bytes->size()) + " bytes over the limit");
    }
    Reply(conn, Op::kBlock, f.request_id, p.bytes->view());
    return Status::Ok();
  }
  return SendFileBlock(conn, f.request_id, p);
}

Status PeerServer::State::SendFileBlock(ServerConn& conn, uint64_t id, const BlockPayload& p) {
  FdGuard guard{p.fd};
  if (p.fd < 0) return Internal("peer service returned neither bytes nor a file");
  if (p.length > kMaxPayload) {
    return Internal("block of " + std::to_string(p.length) + " bytes over the limit");
  }
  struct stat st {};
  if (::fstat(p.fd, &st) != 0) return ErrnoStatus("peer server: fstat of a block file", errno);
  if (static_cast<uint64_t>(st.st_size) < p.file_offset + p.length) {
    return Internal("block file holds " + std::to_string(st.st_size) + " bytes, fewer than " +
                    std::to_string(p.file_offset + p.length));
  }
  uint64_t sum = 0;
  if (p.checksum) {
    sum = *p.checksum;
  } else {
    ASSIGN_OR_RETURN(sum, ChecksumFileRange(p.fd, p.file_offset, p.length));
  }
  std::string header = EncodeFrameHeader(Op::kBlock, 0, id, static_cast<uint32_t>(p.length), sum);
  MutexLock lock(conn.write_mu);
  c.bytes_sent.fetch_add(header.size() + p.length);
  Deadline d = After(opts.io_timeout);
  Status s = SendAll(conn.fd, {header}, d, /*more=*/true);
  if (s.ok()) s = SendFileRange(conn.fd, p.fd, p.file_offset, p.length, d);
  if (!s.ok()) {
    // Part of a frame may be out: the connection cannot carry another one.
    GLOG_DEBUG("peer server {}: dropping {}: reply failed: {}", address, conn.peer, s.ToString());
    ShutdownSocket(conn.fd);
  }
  return Status::Ok();
}

Status PeerServer::State::HandleWarm(ServerConn& conn, const Frame& f) {
  ASSIGN_OR_RETURN(BlockRequest r, DecodeRequest(f));
  ASSIGN_OR_RETURN(bool cached, service->Warm(r));
  Reply(conn, Op::kWarmDone, f.request_id, EncodeWarmDone(cached));
  return Status::Ok();
}

Status PeerServer::State::HandleStatus(ServerConn& conn, const Frame& f) {
  RETURN_IF_ERROR(DecodeEmpty(f.payload, f.op));
  ASSIGN_OR_RETURN(std::string json, service->StatusJson());
  if (json.empty() || json.size() > kMaxPayload) {
    return Internal("status JSON of " + std::to_string(json.size()) + " bytes");
  }
  Reply(conn, Op::kStatusReply, f.request_id, json);
  return Status::Ok();
}

void PeerServer::State::Reply(ServerConn& conn, Op op, uint64_t id, std::string_view payload) {
  MutexLock lock(conn.write_mu);
  c.bytes_sent.fetch_add(kFrameHeaderSize + payload.size());
  Status s = WriteFrame(conn.fd, op, id, payload, After(opts.io_timeout));
  if (s.ok()) return;
  GLOG_DEBUG("peer server {}: dropping {}: reply failed: {}", address, conn.peer, s.ToString());
  ShutdownSocket(conn.fd);
}

}  // namespace granary::net
