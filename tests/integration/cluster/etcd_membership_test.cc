// EtcdMembership against a real etcd (Debian's etcd-server) on loopback.
//
// Each test starts its own etcd on free loopback ports with a temporary data
// directory (EtcdProcess below: by PID, SIGKILLed and reaped at the end) and
// runs members with a 3 s lease. Waiting for etcd-side effects (a lease
// expiring, a poll noticing) is a bounded poll on the members' views.
// Skips when the `etcd` binary is not installed.
#include "cluster/etcd_membership.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ufs/curl_client.h"

namespace granary::cluster {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

constexpr milliseconds kTtl{3000};

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool EtcdInstalled() {
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    if (access((dirs.substr(start, colon - start) + "/etcd").c_str(), X_OK) == 0) return true;
    start = colon + 1;
  }
  return false;
}

// Polls `done` every 50 ms until it holds or `limit` passes; true if it held.
bool WaitUntil(const std::function<bool()>& done, milliseconds limit) {
  const auto deadline = SteadyClock::now() + limit;
  while (SteadyClock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return done();
}

// One etcd process on loopback with its own data directory; killed by PID.
class EtcdProcess {
 public:
  EtcdProcess() : client_port_(FreeLoopbackPort()), peer_port_(FreeLoopbackPort()) {
    char tmpl[] = "/tmp/granary-etcd-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~EtcdProcess() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(client_port_); }

  // Starts etcd (on the same data dir and ports as before, if restarted) and
  // waits until /health answers. False after 20 s without an answer.
  bool Start() {
    const std::string client = endpoint();
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    const std::string data = dir_ + "/data";
    const std::string log = dir_ + "/etcd.log";
    std::vector<std::string> args = {"etcd",     "--name",
                                     "t",        "--data-dir",
                                     data,       "--listen-client-urls",
                                     client,     "--advertise-client-urls",
                                     client,     "--listen-peer-urls",
                                     peer,       "--initial-advertise-peer-urls",
                                     peer,       "--initial-cluster",
                                     "t=" + peer};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      execvp("etcd", argv.data());
      _exit(127);
    }
    CurlClient probe(CurlClientOptions{.max_in_flight = 1,
                                       .connect_timeout = milliseconds(500),
                                       .request_timeout = milliseconds(1000)});
    return WaitUntil(
        [&] {
          auto r = probe.Send(HttpRequest{.url = client + "/health"});
          return r.ok() && r->status == 200;
        },
        seconds(20));
  }

  // SIGKILL and reap: etcd vanishes like a crashed machine.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  int client_port_;
  int peer_port_;
  std::string dir_;
  pid_t pid_ = -1;
};

class EtcdMembershipIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdInstalled()) GTEST_SKIP() << "etcd not installed (apt-get install etcd-server)";
    etcd_ = std::make_unique<EtcdProcess>();
    ASSERT_TRUE(etcd_->Start()) << "etcd did not start";
  }

  std::unique_ptr<EtcdMembership> NewMember(const std::string& address,
                                            std::vector<std::string> endpoints = {}) {
    if (endpoints.empty()) endpoints = {etcd_->endpoint()};
    return std::make_unique<EtcdMembership>(
        EtcdMembershipOptions{.endpoints = std::move(endpoints),
                              .cluster = "test",
                              .dataset = "ds1",
                              .self = {.address = address, .capacity = 1 << 30},
                              .ttl = kTtl});
  }

  static bool Sees(const EtcdMembership& m, const std::string& node_id) {
    return m.placement()->Find(node_id) != nullptr;
  }

  std::unique_ptr<EtcdProcess> etcd_;
};

TEST_F(EtcdMembershipIntegrationTest, TwoMembersJoinAndSeeEachOther) {
  auto a = NewMember("127.0.0.1:7001");
  std::mutex mu;
  std::condition_variable changed;
  std::shared_ptr<const Placement> seen;  // guarded by mu
  a->OnChange([&](std::shared_ptr<const Placement> p) {
    std::lock_guard lock(mu);
    seen = std::move(p);
    changed.notify_all();
  });
  ASSERT_TRUE(a->Start().ok());
  EXPECT_TRUE(Sees(*a, "127.0.0.1:7001"));  // its own registration is in the first view
  auto b = NewMember("127.0.0.1:7002");
  ASSERT_TRUE(b->Start().ok());
  EXPECT_EQ(b->placement()->members().size(), 2u);  // b reads a at Start
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(
        changed.wait_for(lock, seconds(5), [&] { return seen && seen->members().size() == 2; }));
  }
  const Member* other = a->placement()->Find("127.0.0.1:7002");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->address, "127.0.0.1:7002");
  EXPECT_EQ(other->capacity, 1u << 30);
  EXPECT_GT(other->started_unix_ms, 0);
  EXPECT_NE(a->Describe().find("etcd " + etcd_->endpoint()), std::string::npos) << a->Describe();
  // Both compute the same owners.
  for (int i = 0; i < 100; ++i) {
    const std::string k = "key" + std::to_string(i);
    EXPECT_EQ(a->placement()->Owner(k)->node_id, b->placement()->Owner(k)->node_id);
  }
}

TEST_F(EtcdMembershipIntegrationTest, StopIsSeenAsADepartureAtOnce) {
  auto a = NewMember("127.0.0.1:7001");
  auto b = NewMember("127.0.0.1:7002");
  ASSERT_TRUE(a->Start().ok());
  ASSERT_TRUE(b->Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return Sees(*a, "127.0.0.1:7002"); }, seconds(5)));
  const auto stopped = SteadyClock::now();
  b->Stop();
  // The lease is revoked: well before the TTL would expire it.
  ASSERT_TRUE(WaitUntil([&] { return !Sees(*a, "127.0.0.1:7002"); }, seconds(5)));
  EXPECT_LT(SteadyClock::now() - stopped, kTtl);
  b->Stop();  // idempotent
}

TEST_F(EtcdMembershipIntegrationTest, CrashedMemberLeavesWithinTheTtl) {
  auto a = NewMember("127.0.0.1:7001");
  auto b = NewMember("127.0.0.1:7002");
  ASSERT_TRUE(a->Start().ok());
  ASSERT_TRUE(b->Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return Sees(*a, "127.0.0.1:7002"); }, seconds(5)));
  const auto crashed = SteadyClock::now();
  b->AbandonForTest();  // no more keepalives, no revoke
  ASSERT_TRUE(WaitUntil([&] { return !Sees(*a, "127.0.0.1:7002"); }, kTtl + seconds(5)));
  const auto took = std::chrono::duration_cast<milliseconds>(SteadyClock::now() - crashed);
  EXPECT_LE(took, kTtl + milliseconds(1500)) << took.count() << " ms";
  // A member never sees itself leave.
  EXPECT_TRUE(Sees(*a, "127.0.0.1:7001"));
}

TEST_F(EtcdMembershipIntegrationTest, UnreachableEtcdFailsStartWithinSeconds) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  auto m = NewMember("127.0.0.1:7001", {dead});
  const auto start = SteadyClock::now();
  Status s = m->Start();
  EXPECT_LT(SteadyClock::now() - start, seconds(5));
  ASSERT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("etcd " + dead + ": connect failed"), std::string::npos)
      << s.message();
}

TEST_F(EtcdMembershipIntegrationTest, FailsOverToTheNextEndpoint) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  auto a = NewMember("127.0.0.1:7001", {dead, etcd_->endpoint()});
  ASSERT_TRUE(a->Start().ok());
  auto b = NewMember("127.0.0.1:7002");
  ASSERT_TRUE(b->Start().ok());
  EXPECT_TRUE(WaitUntil([&] { return Sees(*a, "127.0.0.1:7002"); }, seconds(5)));
}

TEST_F(EtcdMembershipIntegrationTest, MembersRegisterAgainAfterEtcdRestarts) {
  auto a = NewMember("127.0.0.1:7001");
  auto b = NewMember("127.0.0.1:7002");
  ASSERT_TRUE(a->Start().ok());
  ASSERT_TRUE(b->Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return Sees(*a, "127.0.0.1:7002"); }, seconds(5)));
  etcd_->Kill();
  // Down for longer than the TTL; the members keep their last view meanwhile.
  std::this_thread::sleep_for(kTtl + seconds(1));
  EXPECT_EQ(a->placement()->members().size(), 2u);
  ASSERT_TRUE(etcd_->Start());
  // Both keys are back in etcd, bound to live leases: a fresh member sees them.
  auto c = NewMember("127.0.0.1:7003");
  ASSERT_TRUE(c->Start().ok());
  EXPECT_TRUE(WaitUntil([&] { return Sees(*c, "127.0.0.1:7001") && Sees(*c, "127.0.0.1:7002"); },
                        kTtl + seconds(5)));
  // And they stay after a full TTL (their leases are kept alive, not stale).
  std::this_thread::sleep_for(kTtl + seconds(1));
  EXPECT_TRUE(Sees(*c, "127.0.0.1:7001"));
  EXPECT_TRUE(Sees(*c, "127.0.0.1:7002"));
  EXPECT_TRUE(WaitUntil([&] { return Sees(*a, "127.0.0.1:7003") && Sees(*b, "127.0.0.1:7003"); },
                        seconds(5)));
}

TEST_F(EtcdMembershipIntegrationTest, LostLeaseIsGrantedAgain) {
  auto a = NewMember("127.0.0.1:7001");
  auto b = NewMember("127.0.0.1:7002");
  ASSERT_TRUE(a->Start().ok());
  ASSERT_TRUE(b->Start().ok());
  const int64_t old_lease = a->lease_id();
  ASSERT_NE(old_lease, 0);
  // Revoke a's lease behind its back, as an expiry during a partition would.
  CurlClient http;
  const std::string body = "{\"ID\":\"" + std::to_string(old_lease) + "\"}";
  auto r = http.Send(
      HttpRequest{.method = "POST", .url = etcd_->endpoint() + "/v3/lease/revoke", .body = body});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200) << r->body;
  // a notices at its next keepalive and registers under a new lease.
  ASSERT_TRUE(WaitUntil([&] { return a->lease_id() != 0 && a->lease_id() != old_lease; },
                        kTtl + seconds(2)));
  EXPECT_TRUE(WaitUntil([&] { return Sees(*b, "127.0.0.1:7001"); }, seconds(5)));
  std::this_thread::sleep_for(kTtl + seconds(1));
  EXPECT_TRUE(Sees(*b, "127.0.0.1:7001"));
}

}  // namespace
}  // namespace granary::cluster
