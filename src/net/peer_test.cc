// PeerServer + PeerClient over 127.0.0.1 with a fake PeerService: payloads,
// pipelining, errors, auth, hostile and silent peers, restarts.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "net/handshake.h"
#include "net/peer_client.h"
#include "net/peer_server.h"
#include "net/socket.h"

namespace granary::net {
namespace {

using std::chrono::milliseconds;

std::string Content(const std::string& key, size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 131 + key.size() * 7) % 251);
  return s;
}

// Objects are generated from their key. Keys select behaviour:
//   "missing"  → NotFound          "file/…" → served from a memfd (sendfile path)
//   "hold/…"   → waits until Release()   "gate/…" → waits on `gate` (a latch)
class FakeService : public PeerService {
 public:
  static constexpr uint64_t kFileSize = 3 << 20;
  FakeService() {
    memfd_ = ::memfd_create("peer_test", MFD_CLOEXEC);
    std::string data = Content("file", kFileSize);
    EXPECT_EQ(::pwrite(memfd_, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  }
  ~FakeService() override { ::close(memfd_); }

  Result<BlockPayload> GetBlock(const BlockRequest& r) override {
    if (r.key == "missing") return NotFound(r.key + ": no such object");
    if (r.etag != "e1") return Stale(r.key + ": etag is e1, not " + r.etag);
    if (r.key.starts_with("hold/")) Hold();
    if (r.key.starts_with("gate/")) gate->arrive_and_wait();
    if (r.key.starts_with("file/")) {
      return BlockPayload{.fd = ::dup(memfd_), .file_offset = r.offset, .length = r.length};
    }
    if (r.key.starts_with("sum/") || r.key.starts_with("badsum/")) {
      // A cache file's block sent with the checksum recorded when it was
      // admitted; "badsum/": the file changed since (a bad disk).
      std::string bytes = Content("file", kFileSize).substr(r.offset, r.length);
      uint64_t sum = PayloadChecksum(bytes) ^ (r.key.starts_with("badsum/") ? 1 : 0);
      return BlockPayload{
          .fd = ::dup(memfd_), .file_offset = r.offset, .length = r.length, .checksum = sum};
    }
    auto bytes = BlockBuffer::Adopt(Content(r.key, r.size).substr(r.offset, r.length));
    return BlockPayload{.bytes = bytes};
  }
  // Holds only the keys under "held/".
  Result<BlockPayload> GetCachedBlock(const BlockRequest& r) override {
    if (!r.key.starts_with("held/")) return NotFound(r.key + ": not held here");
    return GetBlock(r);
  }
  Result<bool> Warm(const BlockRequest& r) override { return r.key != "refuse"; }
  Result<std::string> StatusJson() override { return std::string("{\"node\":\"fake\"}"); }

  void WaitHeld(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return held_ >= n; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

  std::unique_ptr<std::latch> gate;

 private:
  void Hold() {
    std::unique_lock lock(mu_);
    ++held_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  int memfd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
  bool released_ = false;
};

BlockRequest Req(std::string key, uint64_t size = 100000, uint64_t offset = 1000,
                 uint64_t length = 50000) {
  return BlockRequest{.dataset = "ds",
                      .key = std::move(key),
                      .etag = "e1",
                      .size = size,
                      .block = 0,
                      .offset = offset,
                      .length = length};
}

class PeerTest : public ::testing::Test {
 protected:
  std::unique_ptr<PeerServer> StartServer(std::string secret = "s3cret", std::string dataset = "ds",
                                          std::string listen = "127.0.0.1:0", int workers = 4) {
    auto s = PeerServer::Start(PeerServerOptions{.listen = std::move(listen),
                                                 .secret = std::move(secret),
                                                 .dataset = std::move(dataset),
                                                 .node_id = "server-node",
                                                 .io_timeout = milliseconds(2000),
                                                 .max_connections = 8,
                                                 .worker_threads = workers},
                               &service_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static PeerClientOptions ClientOpts(std::string secret = "s3cret", std::string dataset = "ds") {
    return PeerClientOptions{.secret = std::move(secret),
                             .dataset = std::move(dataset),
                             .node_id = "client-node",
                             .connect_timeout = milliseconds(1000),
                             .request_timeout = milliseconds(5000),
                             .connections = 2};
  }
  static int64_t MsSince(Deadline t0) {
    return std::chrono::duration_cast<milliseconds>(Now() - t0).count();
  }
  FakeService service_;
};

TEST_F(PeerTest, GetBlockFromBytes) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  auto got = client.GetBlock(Req("a/b"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->view(), Content("a/b", 100000).substr(1000, 50000));
  EXPECT_EQ(client.stats().requests, 1u);
  EXPECT_EQ(client.stats().connects, 1u);
  EXPECT_GE(client.stats().bytes_received, 50000u + kFrameHeaderSize);
  EXPECT_EQ(server->stats().requests_by_op[static_cast<size_t>(Op::kGetBlock)], 1u);
  EXPECT_GE(server->stats().bytes_sent, 50000u);
}

// A handover's request: the block when the peer holds it; "not held" is an
// answer, not a peer error.
TEST_F(PeerTest, GetCachedBlockAnswersOnlyWhatThePeerHolds) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  auto got = client.GetCachedBlock(Req("held/a"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->view(), Content("held/a", 100000).substr(1000, 50000));
  EXPECT_EQ(client.GetCachedBlock(Req("cold/a")).status().code(), Code::kNotFound);
  EXPECT_EQ(client.stats().errors[static_cast<size_t>(PeerErrorKind::kRemote)], 0u);
  EXPECT_EQ(server->stats().requests_by_op[static_cast<size_t>(Op::kGetCachedBlock)], 2u);
}

// Replies are received in pieces of a 256 KiB buffer and straight into
// their block buffers: payloads of every size around those boundaries, from
// bytes and from files, pipelined on shared connections, arrive exact.
TEST_F(PeerTest, RepliesOfEverySizeArriveExactAcrossTheReceiveBuffer) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  const std::vector<uint64_t> lengths = {0,         1,
                                         31,        32,
                                         33,        4095,
                                         4096,      (256 << 10) - 33,
                                         256 << 10, (256 << 10) + 1,
                                         1 << 20,   (3 << 20) - 7};
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (size_t i = 0; i < lengths.size(); ++i) {
    threads.emplace_back([&, i] {
      const uint64_t len = lengths[i];
      const uint64_t off = (FakeService::kFileSize - len) / 2;
      for (const char* key : {"file/x", "sum/x", "bytes/x"}) {
        const uint64_t size = key[0] == 'b' ? len + off : FakeService::kFileSize;
        auto got = client.GetBlock(Req(key, size, off, len));
        const std::string want = key[0] == 'b' ? Content(key, size).substr(off, len)
                                               : Content("file", size).substr(off, len);
        if (!got.ok() || (*got)->view() != want) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A block sent from a file without the server reading it is still checked
// end to end: when the file no longer matches the recorded checksum, the
// caller gets Corruption, never the bytes, and the next call works.
TEST_F(PeerTest, AChecksumFailureOnTheSendfilePathIsRefused) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  auto bad = client.GetBlock(Req("badsum/x", FakeService::kFileSize, 4096, 1 << 20));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorruption) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("checksum"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(client.stats().errors[static_cast<size_t>(PeerErrorKind::kChecksum)], 1u);
  auto good = client.GetBlock(Req("sum/x", FakeService::kFileSize, 4096, 1 << 20));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ((*good)->view(), Content("file", FakeService::kFileSize).substr(4096, 1 << 20));
}

TEST_F(PeerTest, GetBlockFromFileRegion) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  for (uint64_t offset : {0ull, 4097ull, 1ull << 20}) {
    auto got = client.GetBlock(Req("file/x", FakeService::kFileSize, offset, 1 << 20));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ((*got)->view(), Content("file", FakeService::kFileSize).substr(offset, 1 << 20));
  }
  auto empty = client.GetBlock(Req("file/x", FakeService::kFileSize, 5, 0));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)->view(), "");
}

TEST_F(PeerTest, WarmStatusAndPing) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  EXPECT_TRUE(*client.Warm(Req("x")));
  EXPECT_FALSE(*client.Warm(Req("refuse")));
  EXPECT_EQ(*client.StatusJson(), "{\"node\":\"fake\"}");
  EXPECT_TRUE(client.Ping().ok());
  PeerServerStats s = server->stats();
  EXPECT_EQ(s.requests_by_op[static_cast<size_t>(Op::kWarm)], 2u);
  EXPECT_EQ(s.requests_by_op[static_cast<size_t>(Op::kStatus)], 1u);
  EXPECT_EQ(s.requests_by_op[static_cast<size_t>(Op::kPing)], 1u);
}

// 32 callers on 2 connections: the gate opens only when all 32 requests are
// inside the service at once, which needs them pipelined on the connections.
TEST_F(PeerTest, ThirtyTwoCallersPipelineOnTwoConnections) {
  constexpr int kCallers = 32;
  service_.gate = std::make_unique<std::latch>(kCallers);
  auto server = StartServer("s3cret", "ds", "127.0.0.1:0", kCallers);
  PeerClient client(server->address(), ClientOpts());
  std::vector<std::thread> threads;
  std::vector<Status> results(kCallers);
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      std::string key = "gate/" + std::to_string(i);
      auto got = client.GetBlock(Req(key, 20000 + i, i, 10000 + i));
      if (!got.ok()) {
        results[i] = got.status();
      } else if ((*got)->view() != Content(key, 20000 + i).substr(i, 10000 + i)) {
        results[i] = Corruption("wrong bytes for " + key);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(client.stats().connects, 2u);
  EXPECT_EQ(server->stats().connections_accepted, 2u);
}

TEST_F(PeerTest, RemoteErrorCodeTravels) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  Status s = client.GetBlock(Req("missing")).status();
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "peer " + server->address() + ": missing: no such object");
  BlockRequest stale = Req("k");
  stale.etag = "e0";
  EXPECT_EQ(client.GetBlock(stale).status().code(), Code::kStale);
  BlockRequest other = Req("k");
  other.dataset = "other";
  EXPECT_EQ(client.GetBlock(other).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.stats().errors[static_cast<size_t>(PeerErrorKind::kRemote)], 3u);
  EXPECT_TRUE(client.GetBlock(Req("k")).ok());  // the connections survive remote errors
  EXPECT_EQ(client.stats().connects, 2u);
}

TEST_F(PeerTest, WrongSecretIsPermissionDenied) {
  auto server = StartServer("server-secret-value");
  PeerClient client(server->address(), ClientOpts("client-secret-value"));
  Status s = client.GetBlock(Req("k")).status();
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_EQ(s.message().find("secret-value"), std::string::npos) << s.ToString();
  EXPECT_EQ(server->stats().auth_failures, 1u);
  EXPECT_EQ(client.stats().errors[static_cast<size_t>(PeerErrorKind::kAuth)], 1u);
}

TEST_F(PeerTest, SecureAndInsecureNodesRefuseEachOther) {
  auto secure = StartServer("s3cret");
  PeerClient insecure_client(secure->address(), ClientOpts(""));
  EXPECT_EQ(insecure_client.GetBlock(Req("k")).status().code(), Code::kPermissionDenied);
  auto insecure = StartServer("");
  PeerClient secure_client(insecure->address(), ClientOpts("s3cret"));
  EXPECT_EQ(secure_client.GetBlock(Req("k")).status().code(), Code::kPermissionDenied);
  PeerClient both_insecure(insecure->address(), ClientOpts(""));
  EXPECT_TRUE(both_insecure.GetBlock(Req("k")).ok());
}

TEST_F(PeerTest, DatasetMismatchRefused) {
  auto server = StartServer("s3cret", "ds-a");
  PeerClient client(server->address(), ClientOpts("s3cret", "ds-b"));
  Status s = client.GetBlock(Req("k")).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("serves dataset ds-a, this node dataset ds-b"), std::string::npos)
      << s.ToString();
}

// Reads from fd until EOF or error; false if nothing happens for 5 s.
bool DrainsToEof(int fd) {
  char buf[4096];
  for (;;) {
    auto n = RecvSome(fd, buf, sizeof(buf), After(milliseconds(5000)));
    if (!n.ok()) return n.status().message() != "timed out";
    if (*n == 0) return true;
  }
}

TEST_F(PeerTest, GarbageDropsOnlyThatConnection) {
  auto server = StartServer();
  PeerClient client(server->address(), ClientOpts());
  ASSERT_TRUE(client.GetBlock(Req("k")).ok());
  for (const std::string& garbage :
       {std::string("GET / HTTP/1.1\r\n\r\n"), std::string(64, '\xff')}) {
    auto fd = ConnectTcp(server->address(), After(milliseconds(1000)));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(SendAll(*fd, {garbage}, After(milliseconds(1000))).ok());
    EXPECT_TRUE(DrainsToEof(*fd));
    ::close(*fd);
  }
  EXPECT_EQ(server->stats().protocol_errors, 2u);
  auto got = client.GetBlock(Req("k2"));
  EXPECT_TRUE(got.ok()) << got.status().ToString();
}

TEST_F(PeerTest, SilentListenerCostsAtMostRequestTimeout) {
  std::string address;
  auto fd = ListenTcp("127.0.0.1:0", 16, &address);  // the kernel accepts; nobody answers
  ASSERT_TRUE(fd.ok());
  PeerClientOptions o = ClientOpts();
  o.connect_timeout = milliseconds(5000);
  o.request_timeout = milliseconds(300);
  PeerClient client(address, o);
  Deadline t0 = Now();
  Status s = client.GetBlock(Req("k")).status();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_LT(MsSince(t0), 300 + 700);
  o.connect_timeout = milliseconds(200);
  o.request_timeout = milliseconds(5000);
  PeerClient short_connect(address, o);
  t0 = Now();
  s = short_connect.GetBlock(Req("k")).status();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("peer " + address + ": connect timed out after 200 ms"),
            std::string::npos)
      << s.ToString();
  EXPECT_LT(MsSince(t0), 200 + 700);
  ::close(*fd);
}

TEST_F(PeerTest, StalledRequestTimesOutAndLateReplyIsDropped) {
  auto server = StartServer();
  PeerClientOptions o = ClientOpts();
  o.request_timeout = milliseconds(300);
  o.connections = 1;
  PeerClient client(server->address(), o);
  Deadline t0 = Now();
  Status s = client.GetBlock(Req("hold/1")).status();
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("request timed out after 300 ms"), std::string::npos) << s.ToString();
  EXPECT_LT(MsSince(t0), 300 + 700);
  service_.Release();
  EXPECT_TRUE(client.GetBlock(Req("k")).ok());  // same connection, late reply ignored
  EXPECT_EQ(client.stats().connects, 1u);
  EXPECT_EQ(client.stats().errors[static_cast<size_t>(PeerErrorKind::kTimeout)], 1u);
}

TEST_F(PeerTest, ConnectRefusedIsUnavailable) {
  std::string address;
  {
    auto server = StartServer();
    address = server->address();
  }
  PeerClient client(address, ClientOpts());
  Status s = client.GetBlock(Req("k")).status();
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_TRUE(s.message().starts_with("peer " + address + ": ")) << s.ToString();
  EXPECT_EQ(client.stats().errors[static_cast<size_t>(PeerErrorKind::kConnect)], 1u);
}

TEST_F(PeerTest, ServerKilledMidRequestFailsFastThenReconnects) {
  auto server = StartServer();
  const std::string address = server->address();
  PeerClient client(address, ClientOpts());
  ASSERT_TRUE(client.GetBlock(Req("k")).ok());
  Status held;
  Deadline failed_at{};
  std::thread caller([&] {
    held = client.GetBlock(Req("hold/1")).status();
    failed_at = Now();
  });
  service_.WaitHeld(1);
  const Deadline t0 = Now();
  std::thread killer([&] { server.reset(); });  // waits for the held service call
  caller.join();
  EXPECT_EQ(held.code(), Code::kUnavailable) << held.ToString();
  EXPECT_LT(failed_at - t0, milliseconds(2000));  // request_timeout is 5000
  service_.Release();
  killer.join();
  server = StartServer("s3cret", "ds", address);
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < 4; ++i) {  // both pooled connections come back
    auto got = client.GetBlock(Req("k" + std::to_string(i)));
    EXPECT_TRUE(got.ok()) << got.status().ToString();
  }
  EXPECT_GE(client.stats().errors[static_cast<size_t>(PeerErrorKind::kConnectionLost)], 1u);
}

TEST_F(PeerTest, TooManyConnectionsIsUnavailable) {
  auto s = PeerServer::Start(
      PeerServerOptions{.listen = "127.0.0.1:0", .dataset = "ds", .max_connections = 1}, &service_);
  ASSERT_TRUE(s.ok());
  PeerClientOptions o = ClientOpts("");
  o.connections = 1;
  PeerClient first((*s)->address(), o), second((*s)->address(), o);
  ASSERT_TRUE(first.Ping().ok());
  Status st = second.Ping();
  EXPECT_EQ(st.code(), Code::kUnavailable);
  EXPECT_NE(st.message().find("too many peer connections"), std::string::npos) << st.ToString();
}

// A hand-made server that authenticates properly, then corrupts the block payload.
TEST_F(PeerTest, PayloadChecksumMismatchIsNeverReturned) {
  std::string address;
  auto lfd = ListenTcp("127.0.0.1:0", 4, &address);
  ASSERT_TRUE(lfd.ok());
  std::thread fake([&] {
    pollfd p{.fd = *lfd, .events = POLLIN};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    int fd = AcceptTcp(*lfd, nullptr);
    FrameDecoder d;
    AuthConfig self{.secret = "s3cret", .dataset = "ds", .node_id = "evil"};
    Deadline dl = After(milliseconds(5000));
    ASSERT_EQ(ServerHandshake(fd, d, self, "c", dl).failure, HandshakeFailure::kNone);
    auto req = ReadFrame(fd, d, dl);
    ASSERT_TRUE(req.ok());
    std::string frame = EncodeFrame(Op::kBlock, req->request_id, std::string(50000, 'z'));
    frame.back() = 'y';
    ASSERT_TRUE(SendAll(fd, {frame}, dl).ok());
    DrainsToEof(fd);
    ::close(fd);
  });
  PeerClientOptions o = ClientOpts();
  o.connections = 1;
  PeerClient client(address, o);
  Status s = client.GetBlock(Req("k")).status();
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("payload checksum mismatch"), std::string::npos) << s.ToString();
  EXPECT_EQ(client.stats().errors[static_cast<size_t>(PeerErrorKind::kChecksum)], 1u);
  fake.join();
  ::close(*lfd);
}

TEST(PeerServerOptionsTest, ValidateNamesTheField) {
  PeerServerOptions o{.dataset = "ds"};
  EXPECT_TRUE(o.Validate().ok());
  o.listen = "nope";
  EXPECT_NE(o.Validate().message().find("expected HOST:PORT"), std::string::npos);
  o = PeerServerOptions{};
  EXPECT_NE(o.Validate().message().find("dataset is required"), std::string::npos);
  o = PeerServerOptions{.dataset = "ds", .worker_threads = 0};
  EXPECT_NE(o.Validate().message().find("worker_threads"), std::string::npos);
}

}  // namespace
}  // namespace granary::net
