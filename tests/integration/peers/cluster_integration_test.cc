// Several Granary nodes sharing one cache, end to end: three `granary mount`
// daemons, each in a network namespace of its own (NetnsCluster), over one
// origin (moto_server in a fourth namespace) holding 3,000 objects of 2-100 KB
// plus 30 of 1.2-4.5 blocks (256 KiB blocks, placed block by block). What a
// user would notice is asserted at the origin's side, from its request log:
//
//   - independent caches (no cluster flags): every node fetches every block,
//     3 GETs per block; the baseline the cluster is measured against;
//   - a cluster (static peers, or etcd membership): all three mounts read
//     every object concurrently, every byte exact, and the origin sees exactly
//     one GET per block for the whole cluster;
//   - `granary load` on one node warms the cluster: the others then read with
//     no origin GET;
//   - a node killed (SIGKILL) in the middle of an epoch on the other two: no
//     read fails; restarted on its cache, it rejoins, and a re-read on every
//     node reaches the origin zero times;
//   - a node with the wrong secret is refused by the others (they count or log
//     an auth failure) and still reads everything from the origin;
//   - a peer that accepts TCP and never answers delays a read by at most
//     --cluster-peer-timeout.
//
// Needs root, /dev/fuse, moto_server and curl (skipped otherwise); etcd for
// its case. Without network namespaces the nodes run on 127.0.0.2-4 (the log
// says so). Cluster cases skip while `granary mount --help` lacks
// --cluster-listen. Every mount, process and namespace is removed in
// TearDown/TearDownTestSuite, also when a case fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster_harness.h"
#include "netns.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using testing::Dataset;
using testing::EpochOptions;
using testing::EpochResult;
using testing::GranaryNode;
using testing::NetnsCluster;

constexpr uint64_t kBlock = 256 << 10;
constexpr int kNodes = 3;
constexpr char kBucket[] = "granary-peers";
constexpr char kPrefix[] = "ds";

// Up to 10 keys of a GET count map, for failure messages.
std::string FirstKeys(const std::map<std::string, uint64_t>& counts) {
  std::string out;
  int n = 0;
  for (const auto& [key, gets] : counts) {
    if (n++ == 10) return out + " ...";
    out += key + " (" + std::to_string(gets) + ") ";
  }
  return out;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      skip_ = "needs root and /dev/fuse";
      return;
    }
    ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
    ::setenv("AWS_CONFIG_FILE", "/dev/null", 1);
    work_ = new testing::TempDir();
    auto net = NetnsCluster::Create({.nodes = kNodes});
    if (!net.ok()) {
      setup_error_ = net.status().ToString();
      return;
    }
    net_ = net->release();
    if (net_->isolated()) {
      GTEST_LOG_(INFO) << "network namespaces " << net_->ns_name(NetnsCluster::kOrigin)
                       << " (origin " << net_->ip(NetnsCluster::kOrigin) << ") and " << kNodes
                       << " nodes from " << net_->ip(0);
    } else {
      GTEST_LOG_(INFO) << "NO network namespaces (" << net_->fallback_reason()
                       << "): falling back to loopback, nodes on 127.0.0.2-" << kNodes + 1;
    }
    auto origin = testing::Origin::Start(net_, work_->path());
    if (!origin.ok()) {
      setup_error_ = origin.status().ToString();
      return;
    }
    origin_ = origin->release();
    data_ = new Dataset(testing::MakeDataset(2970, 30, kBlock, 7));
    auto t0 = std::chrono::steady_clock::now();
    if (Status s = origin_->Upload(kBucket, kPrefix, *data_); !s.ok()) {
      setup_error_ = "upload: " + s.ToString();
      return;
    }
    GTEST_LOG_(INFO) << data_->size() << " objects (" << testing::BlocksOf(*data_, kBlock)
                     << " blocks of 256 KiB) uploaded in "
                     << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                     << " s";
    for (const auto& [key, bytes] : *data_) keys_.push_back(key);
    cluster_flags_ = testing::HasClusterFlags(GRANARY_CLI_PATH);
  }

  static void TearDownTestSuite() {
    delete origin_;
    delete net_;  // kills what is left, removes the namespaces and the bridge
    delete data_;
    delete work_;
    origin_ = nullptr;
    net_ = nullptr;
    data_ = nullptr;
    work_ = nullptr;
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    cluster_name_ = "gt" + std::to_string(::getpid()) + "-" + info->name();
    nodes_ = testing::MakeNodes(net_, kNodes, std::string("s3://") + kBucket + "/" + kPrefix,
                                origin_->endpoint(), dir_.path());
  }

  void TearDown() override {
    for (GranaryNode& n : nodes_) {
      if (HasFailure()) std::cerr << "---- node " << n.host << " log tail:\n" << n.LogTail(15);
    }
    testing::StopAll(nodes_);  // the whole cluster at once: nobody drains into a leaving node
    for (pid_t pid : extra_pids_) net_->Kill(pid, SIGKILL);
  }

  // --cluster-peers with every node (and `more`).
  std::string StaticPeers(const std::vector<std::string>& more = {}) const {
    std::string list;
    for (const GranaryNode& n : nodes_) list += (list.empty() ? "" : ",") + n.cluster_addr();
    for (const std::string& m : more) list += "," + m;
    return list;
  }

  std::string SecretFile(const std::string& name, const std::string& secret) const {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << secret << "\n";
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::replace);
    return path;
  }

  // The cluster flags of node i; `membership` is --cluster-peers or --cluster-etcd.
  std::vector<std::string> ClusterArgs(int i, std::vector<std::string> membership,
                                       const std::string& secret_file) const {
    std::vector<std::string> a = {"--cluster-listen", nodes_[i].cluster_addr(), "--cluster-name",
                                  cluster_name_,      "--cluster-secret-file",  secret_file};
    a.insert(a.end(), membership.begin(), membership.end());
    return a;
  }

  void StartStaticCluster(std::vector<std::string> extra = {}) {
    std::string secret = SecretFile("secret", "correct horse battery staple");
    for (int i = 0; i < kNodes; ++i) {
      auto args = ClusterArgs(i, {"--cluster-peers", StaticPeers()}, secret);
      args.insert(args.end(), extra.begin(), extra.end());
      ASSERT_TRUE(nodes_[i].Start(args).ok()) << nodes_[i].LogTail();
    }
  }

  std::string Metrics(int i) const {
    auto m = testing::HttpGet(nodes_[i].metrics_url());
    return m.ok() ? *m : "";
  }

  // Waits until every node in `which` reports at least `want` members.
  void WaitForMembers(const std::vector<int>& which, int want) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string seen;
    while (std::chrono::steady_clock::now() < until) {
      seen.clear();
      bool all = true;
      for (int i : which) {
        double m = testing::MetricSum(Metrics(i), "granary_cluster_members");
        seen += " node" + std::to_string(i) + "=" + std::to_string(static_cast<int>(m));
        all = all && m >= want;
      }
      if (all) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling daemons' metrics
    }
    FAIL() << "granary_cluster_members did not reach " << want << " in 30 s:" << seen;
  }

  // One epoch per node in `which`, all at once.
  std::vector<EpochResult> ReadOn(const std::vector<int>& which, int threads = 4,
                                  std::function<void(int, uint64_t)> on_read = nullptr) {
    std::vector<EpochResult> results(which.size());
    std::vector<std::thread> runs;
    for (size_t j = 0; j < which.size(); ++j) {
      runs.emplace_back([&, j] {
        EpochOptions o{.threads = threads,
                       .seed = static_cast<uint32_t>(100 + which[j] + seed_++),
                       .block_size = kBlock};
        if (on_read) o.on_read = [&, j](uint64_t n) { on_read(which[j], n); };
        results[j] = testing::ReadEpoch(nodes_[which[j]].mountpoint(), *data_, keys_, o);
      });
    }
    for (auto& t : runs) t.join();
    return results;
  }

  static void ExpectClean(const std::vector<EpochResult>& results) {
    for (size_t j = 0; j < results.size(); ++j) {
      const EpochResult& r = results[j];
      EXPECT_EQ(r.reads, keys_.size()) << "epoch " << j;
      EXPECT_EQ(r.failures, 0u) << "epoch " << j << ": "
                                << ::testing::PrintToString(r.first_errors);
      EXPECT_EQ(r.mismatches, 0u) << "epoch " << j << ": "
                                  << ::testing::PrintToString(r.first_errors);
    }
  }

  // Every object had exactly `per_block` origin GETs per block in `delta`.
  static void ExpectGetsPerBlock(const std::map<std::string, uint64_t>& delta, uint64_t per_block) {
    std::vector<std::string> wrong;
    for (const auto& [key, bytes] : *data_) {
      uint64_t want = per_block * std::max<uint64_t>(1, (bytes.size() + kBlock - 1) / kBlock);
      auto it = delta.find(key);
      uint64_t got = it == delta.end() ? 0 : it->second;
      if (got != want && wrong.size() < 10) {
        wrong.push_back(key + " " + std::to_string(got) + " GETs, want " + std::to_string(want));
      }
    }
    EXPECT_EQ(testing::Sum(delta), per_block * testing::BlocksOf(*data_, kBlock));
    EXPECT_TRUE(wrong.empty()) << ::testing::PrintToString(wrong);
  }

  static std::string skip_;
  static std::string setup_error_;
  static testing::TempDir* work_;
  static NetnsCluster* net_;
  static testing::Origin* origin_;
  static Dataset* data_;
  static std::vector<std::string> keys_;
  static bool cluster_flags_;

  testing::TempDir dir_;
  std::string cluster_name_;
  std::vector<GranaryNode> nodes_;
  std::vector<pid_t> extra_pids_;
  std::atomic<uint32_t> seed_{0};
};

std::string ClusterTest::skip_;
std::string ClusterTest::setup_error_;
testing::TempDir* ClusterTest::work_ = nullptr;
NetnsCluster* ClusterTest::net_ = nullptr;
testing::Origin* ClusterTest::origin_ = nullptr;
Dataset* ClusterTest::data_ = nullptr;
std::vector<std::string> ClusterTest::keys_;
bool ClusterTest::cluster_flags_ = false;

#define REQUIRE_CLUSTER_FLAGS() \
  if (!cluster_flags_)          \
  GTEST_SKIP() << "needs --cluster flags (granary mount --help lacks --cluster-listen)"

// The baseline: three plain mounts are three independent caches.
TEST_F(ClusterTest, IndependentCachesEachFetchEveryBlock) {
  auto before = origin_->GetsPerKey();
  for (GranaryNode& n : nodes_) ASSERT_TRUE(n.Start({}).ok()) << n.LogTail();
  ExpectClean(ReadOn({0, 1, 2}));
  auto delta = testing::Delta(origin_->GetsPerKey(), before);
  GTEST_LOG_(INFO) << "independent caches: origin GETs " << testing::Sum(delta) << " for "
                   << data_->size() << " objects / " << testing::BlocksOf(*data_, kBlock)
                   << " blocks on " << kNodes << " nodes";
  ExpectGetsPerBlock(delta, kNodes);
}

TEST_F(ClusterTest, StaticPeersFetchEveryBlockOnceForTheWholeCluster) {
  REQUIRE_CLUSTER_FLAGS();
  StartStaticCluster();
  WaitForMembers({0, 1, 2}, kNodes);
  auto before = origin_->GetsPerKey();
  ExpectClean(ReadOn({0, 1, 2}));
  auto delta = testing::Delta(origin_->GetsPerKey(), before);
  GTEST_LOG_(INFO) << "static cluster: origin GETs " << testing::Sum(delta) << " for "
                   << testing::BlocksOf(*data_, kBlock) << " blocks";
  ExpectGetsPerBlock(delta, 1);
  double remote = 0;
  for (int i = 0; i < kNodes; ++i) {
    remote += std::max(0.0, testing::MetricSum(Metrics(i), "granary_cluster_remote_hits_total"));
  }
  EXPECT_GT(remote, 0) << "no node counted a remote hit";

  testing::ProcessResult st =
      net_->Run(0, {GRANARY_CLI_PATH, "status", nodes_[0].mountpoint(), "--cluster", "--json",
                    "--run-dir", nodes_[0].run_dir()});
  EXPECT_EQ(st.exit_code, 0) << st.err;
  for (const GranaryNode& n : nodes_) {
    EXPECT_NE(st.out.find(n.cluster_addr()), std::string::npos)
        << "status --cluster --json has no row for " << n.cluster_addr() << ": " << st.out;
  }
}

TEST_F(ClusterTest, EtcdMembershipFetchesEveryBlockOnceForTheWholeCluster) {
  REQUIRE_CLUSTER_FLAGS();
  if (::access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "needs etcd (Debian's etcd-server)";
  auto etcd = testing::Etcd::Start(net_, NetnsCluster::kOrigin, dir_.path() + "/etcd");
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  std::string secret = SecretFile("secret", "etcd cluster secret");
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(
        nodes_[i].Start(ClusterArgs(i, {"--cluster-etcd", (*etcd)->endpoint()}, secret)).ok())
        << nodes_[i].LogTail();
  }
  WaitForMembers({0, 1, 2}, kNodes);
  auto before = origin_->GetsPerKey();
  ExpectClean(ReadOn({0, 1, 2}));
  auto delta = testing::Delta(origin_->GetsPerKey(), before);
  GTEST_LOG_(INFO) << "etcd cluster: origin GETs " << testing::Sum(delta) << " for "
                   << testing::BlocksOf(*data_, kBlock) << " blocks";
  ExpectGetsPerBlock(delta, 1);
  testing::StopAll(nodes_);  // before etcd goes away
}

TEST_F(ClusterTest, LoadOnOneNodeWarmsTheWholeCluster) {
  REQUIRE_CLUSTER_FLAGS();
  StartStaticCluster();
  WaitForMembers({0, 1, 2}, kNodes);
  auto before = origin_->GetsPerKey();
  testing::ProcessResult load = net_->Run(
      0, {GRANARY_CLI_PATH, "load", nodes_[0].mountpoint(), "--run-dir", nodes_[0].run_dir()},
      std::chrono::seconds(300));
  EXPECT_EQ(load.exit_code, 0) << load.out << load.err;
  auto loaded = origin_->GetsPerKey();
  ExpectGetsPerBlock(testing::Delta(loaded, before), 1);
  ExpectClean(ReadOn({1, 2}));
  auto delta = testing::Delta(origin_->GetsPerKey(), loaded);
  EXPECT_EQ(testing::Sum(delta), 0u)
      << "reads after a cluster-wide load reached the origin: " << FirstKeys(delta);
}

TEST_F(ClusterTest, KilledNodeFailsNoReadAndRejoinsWarm) {
  REQUIRE_CLUSTER_FLAGS();
  StartStaticCluster({"--cluster-peer-timeout", "2s"});
  WaitForMembers({0, 1, 2}, kNodes);
  auto before = origin_->GetsPerKey();
  ExpectClean(ReadOn({0}));  // every block now has its owner's copy
  ExpectGetsPerBlock(testing::Delta(origin_->GetsPerKey(), before), 1);

  // An epoch on nodes 1 and 2; node 0 is killed a third of the way through.
  std::atomic<bool> killed{false};
  auto epoch = ReadOn({1, 2}, 4, [&](int node, uint64_t n) {
    if (node == 1 && n == keys_.size() / 3 && !killed.exchange(true)) nodes_[0].Crash();
  });
  ASSERT_TRUE(killed.load());
  ExpectClean(epoch);
  auto after_kill = origin_->GetsPerKey();
  GTEST_LOG_(INFO) << "epoch with node 0 killed: origin GETs "
                   << testing::Sum(testing::Delta(after_kill, before))
                   << " since the warm-up started";

  ASSERT_TRUE(nodes_[0].Start(nodes_[0].args).ok()) << nodes_[0].LogTail();
  WaitForMembers({0, 1, 2}, kNodes);
  ExpectClean(ReadOn({0, 1, 2}));
  auto delta = testing::Delta(origin_->GetsPerKey(), after_kill);
  EXPECT_EQ(testing::Sum(delta), 0u)
      << "a re-read after node 0 rejoined reached the origin: " << FirstKeys(delta);
}

TEST_F(ClusterTest, PeerWithTheWrongSecretIsRefusedAndReadsFromTheOrigin) {
  REQUIRE_CLUSTER_FLAGS();
  std::string good = SecretFile("good", "the cluster's secret");
  std::string bad = SecretFile("bad", "not the cluster's secret");
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(nodes_[i]
                    .Start(ClusterArgs(i, {"--cluster-peers", StaticPeers()}, i == 2 ? bad : good))
                    .ok())
        << nodes_[i].LogTail();
  }
  WaitForMembers({0, 1}, 2);
  auto before = origin_->GetsPerKey();
  ExpectClean(ReadOn({2}));
  auto delta = testing::Delta(origin_->GetsPerKey(), before);
  EXPECT_EQ(testing::Sum(delta), testing::BlocksOf(*data_, kBlock))
      << "the refused node should fetch every block from the origin itself";
  EXPECT_LE(testing::MetricSum(Metrics(2), "granary_cluster_remote_hits_total"), 0);
  double auth = 0;
  std::string logged;  // the good nodes' log lines about authentication
  for (int i : {0, 1}) {
    std::string metrics = Metrics(i);
    auth += std::max(0.0, testing::MetricSum(metrics, "granary_cluster_peer_errors_total", "auth"));
    std::istringstream log(nodes_[i].Log());
    for (std::string line; std::getline(log, line);) {
      std::string lower = line;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower.find("failed authentication") != std::string::npos) logged += line + "\n";
    }
    std::istringstream m(metrics);
    for (std::string line; std::getline(m, line);) {
      if (line.starts_with("granary_cluster_peer_errors_total"))
        GTEST_LOG_(INFO) << "node " << i << ": " << line;
    }
  }
  GTEST_LOG_(INFO) << "good nodes: granary_cluster_peer_errors_total{kind=~auth} " << auth
                   << "; their log lines about auth:\n"
                   << logged;
  EXPECT_TRUE(auth > 0 || !logged.empty())
      << "neither node 0 nor node 1 counted or logged an auth failure";
}

TEST_F(ClusterTest, SilentPeerDelaysReadsByAtMostThePeerTimeout) {
  REQUIRE_CLUSTER_FLAGS();
  int port = net_->PortFor(NetnsCluster::kOrigin, 7999);
  auto silent =
      testing::StartSilentPeer(net_, NetnsCluster::kOrigin, port, dir_.path() + "/silent.log");
  ASSERT_TRUE(silent.ok()) << silent.status().ToString();
  extra_pids_.push_back(*silent);
  std::string fake = net_->ip(NetnsCluster::kOrigin) + ":" + std::to_string(port);
  std::string secret = SecretFile("secret", "silent peer case");
  constexpr auto kTimeout = std::chrono::seconds(1);
  for (int i = 0; i < kNodes; ++i) {
    auto args = ClusterArgs(i, {"--cluster-peers", StaticPeers({fake})}, secret);
    args.insert(args.end(), {"--cluster-peer-timeout", "1s"});
    ASSERT_TRUE(nodes_[i].Start(args).ok()) << nodes_[i].LogTail();
  }
  WaitForMembers({0, 1, 2}, kNodes);
  std::vector<std::string> some(keys_.begin(), keys_.begin() + 400);
  EpochResult r = testing::ReadEpoch(nodes_[0].mountpoint(), *data_, some,
                                     EpochOptions{.threads = 8, .seed = 3, .block_size = kBlock});
  EXPECT_EQ(r.failures + r.mismatches, 0u) << ::testing::PrintToString(r.first_errors);
  GTEST_LOG_(INFO) << "with a silent peer: " << r.reads << " reads in " << r.seconds
                   << " s, slowest " << r.max_latency.count() / 1000 << " ms (single-block objects "
                   << r.max_latency_single_block.count() / 1000 << " ms); peer timeout 1 s";
  // The timeout, plus one origin GET and FUSE's own overhead.
  EXPECT_LE(r.max_latency_single_block, kTimeout + std::chrono::milliseconds(1500));
}

}  // namespace
}  // namespace granary
