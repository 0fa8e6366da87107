// A cluster that changes size while it serves, end to end: `granary mount`
// daemons in network namespaces (NetnsCluster) with etcd membership, over one
// origin (moto_server) holding 300 small objects plus 6 of several 256 KiB
// blocks. Asserted at the origin's side, from its request log:
//
//   - 3 nodes read every object; a 4th joins in the middle of the next epoch
//     and then all 4 read every object: the origin sees one GET per block for
//     the whole run, no read fails, every byte is exact, and the new node got
//     its share from the previous owners (handover metric);
//   - 4 -> 3 by a graceful leave (SIGTERM: the node drains) in the middle of
//     an epoch: no read fails and no origin GET after it;
//   - a node killed and restarted with its cache directory at another
//     address is the same member (its id lives on its disk): zero origin
//     GETs, and it took nothing over from the others;
//   - static members (--cluster-peers-file): the file names a 4th node in
//     the middle of an epoch, it starts and the 3 read the file again
//     (SIGHUP): one origin GET per block for the whole run, no failed read;
//   - `granary worker --drain` in the middle of an epoch: the worker
//     reports its drain, exits once the others took over, and no origin
//     GET follows.
//
// Needs root, /dev/fuse, moto_server, curl and etcd (skipped otherwise).
// Reuses the CLI tests' process helpers.
// Every mount, process and namespace is removed in TearDown and
// TearDownTestSuite, also when a case fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cluster_harness.h"
#include "netns.h"
#include "subprocess.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using testing::Dataset;
using testing::EpochOptions;
using testing::EpochResult;
using testing::GranaryNode;
using testing::NetnsCluster;

constexpr uint64_t kBlock = 256 << 10;
constexpr int kHosts = 4;
constexpr char kBucket[] = "granary-elastic";
constexpr char kPrefix[] = "ds";

class ElasticClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      skip_ = "needs root and /dev/fuse";
      return;
    }
    if (::access("/usr/bin/etcd", X_OK) != 0) {
      skip_ = "needs etcd (Debian's etcd-server)";
      return;
    }
    ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
    ::setenv("AWS_CONFIG_FILE", "/dev/null", 1);
    if (!testing::HasClusterFlags(GRANARY_CLI_PATH)) {
      skip_ = "needs --cluster flags";
      return;
    }
    work_ = new testing::TempDir();
    auto net = NetnsCluster::Create({.nodes = kHosts});
    if (!net.ok()) {
      setup_error_ = net.status().ToString();
      return;
    }
    net_ = net->release();
    auto origin = testing::Origin::Start(net_, work_->path());
    if (!origin.ok()) {
      setup_error_ = origin.status().ToString();
      return;
    }
    origin_ = origin->release();
    data_ = new Dataset(testing::MakeDataset(300, 6, kBlock, 11));
    if (Status s = origin_->Upload(kBucket, kPrefix, *data_); !s.ok()) {
      setup_error_ = "upload: " + s.ToString();
      return;
    }
    for (const auto& [key, bytes] : *data_) keys_.push_back(key);
  }

  static void TearDownTestSuite() {
    delete origin_;
    delete net_;
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
    auto etcd = testing::Etcd::Start(net_, NetnsCluster::kOrigin, dir_.path() + "/etcd");
    ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
    etcd_ = std::move(*etcd);
    secret_ = dir_.path() + "/secret";
    std::ofstream(secret_) << "elastic cluster secret\n";
    fs::permissions(secret_, fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::replace);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    cluster_name_ = "gt" + std::to_string(::getpid()) + "-" + info->name();
    nodes_ = testing::MakeNodes(net_, kHosts, std::string("s3://") + kBucket + "/" + kPrefix,
                                origin_->endpoint(), dir_.path());
  }

  void TearDown() override {
    for (GranaryNode& n : nodes_) {
      if (HasFailure()) std::cerr << "---- node " << n.host << " log tail:\n" << n.LogTail(15);
      n.Crash();  // no drains: the cluster goes as a whole
      n.Stop();   // unmounts
    }
    etcd_.reset();  // after the nodes: they leave through it
  }

  Status StartNode(int i) {
    return nodes_[i].Start({"--cluster-listen", nodes_[i].cluster_addr(), "--cluster-name",
                            cluster_name_, "--cluster-secret-file", secret_, "--cluster-etcd",
                            etcd_->endpoint(), "--cluster-drain-timeout", "20s"});
  }

  // Static membership from `peers_file` instead of etcd.
  Status StartStaticNode(int i, const std::string& peers_file) {
    return nodes_[i].Start({"--cluster-listen", nodes_[i].cluster_addr(), "--cluster-secret-file",
                            secret_, "--cluster-peers-file", peers_file, "--cluster-drain-timeout",
                            "20s"});
  }

  // Writes the first `n` nodes' addresses to `path`, one a line.
  void WritePeers(const std::string& path, int n) const {
    std::string text = "# the cache nodes\n";
    for (int i = 0; i < n; ++i) text += nodes_[i].cluster_addr() + "\n";
    std::ofstream(path + ".tmp") << text;
    fs::rename(path + ".tmp", path);
  }

  double Metric(int i, const std::string& name) const {
    auto m = testing::HttpGet(nodes_[i].metrics_url());
    return m.ok() ? testing::MetricSum(*m, name) : -1;
  }

  // Waits until every node in `which` sees exactly `want` members and has no
  // handover in progress.
  void WaitForSettled(const std::vector<int>& which, int want) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string seen;
    while (std::chrono::steady_clock::now() < until) {
      seen.clear();
      bool all = true;
      for (int i : which) {
        const double m = Metric(i, "granary_cluster_members");
        const double h = Metric(i, "granary_cluster_handover_previous_sets");
        seen += " node" + std::to_string(i) + "=" + std::to_string(static_cast<int>(m)) + "/" +
                std::to_string(static_cast<int>(h));
        all = all && m == want && h == 0;
      }
      if (all) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling daemons' metrics
    }
    FAIL() << "members/handovers did not settle at " << want << "/0 in 30 s:" << seen;
  }

  std::vector<EpochResult> ReadOn(const std::vector<int>& which,
                                  std::function<void(int, uint64_t)> on_read = nullptr) {
    std::vector<EpochResult> results(which.size());
    std::vector<std::thread> runs;
    for (size_t j = 0; j < which.size(); ++j) {
      runs.emplace_back([&, j] {
        EpochOptions o{.threads = 4,
                       .seed = static_cast<uint32_t>(200 + which[j] + seed_++),
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

  static uint64_t OriginGets() { return testing::Sum(origin_->GetsPerKey()); }

  static std::string skip_;
  static std::string setup_error_;
  static testing::TempDir* work_;
  static NetnsCluster* net_;
  static testing::Origin* origin_;
  static Dataset* data_;
  static std::vector<std::string> keys_;

  testing::TempDir dir_;
  std::unique_ptr<testing::Etcd> etcd_;
  std::string secret_;
  std::string cluster_name_;
  std::vector<GranaryNode> nodes_;
  std::atomic<uint32_t> seed_{0};
};

std::string ElasticClusterTest::skip_;
std::string ElasticClusterTest::setup_error_;
testing::TempDir* ElasticClusterTest::work_ = nullptr;
NetnsCluster* ElasticClusterTest::net_ = nullptr;
testing::Origin* ElasticClusterTest::origin_ = nullptr;
Dataset* ElasticClusterTest::data_ = nullptr;
std::vector<std::string> ElasticClusterTest::keys_;

TEST_F(ElasticClusterTest, ANodeJoiningMidEpochTakesItsShareFromThePreviousOwners) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(StartNode(i).ok()) << nodes_[i].LogTail();
  WaitForSettled({0, 1, 2}, 3);
  const uint64_t before = OriginGets();
  ExpectClean(ReadOn({0, 1, 2}));

  // The next epoch on the three; the fourth joins a third of the way through.
  std::atomic<bool> joined{false};
  Status join;
  ExpectClean(ReadOn({0, 1, 2}, [&](int node, uint64_t n) {
    if (node == 0 && n == keys_.size() / 3 && !joined.exchange(true)) join = StartNode(3);
  }));
  ASSERT_TRUE(joined.load());
  ASSERT_TRUE(join.ok()) << join.ToString() << nodes_[3].LogTail();
  WaitForSettled({0, 1, 2, 3}, 4);
  ExpectClean(ReadOn({0, 1, 2, 3}));

  const uint64_t gets = OriginGets() - before;
  const uint64_t blocks = testing::BlocksOf(*data_, kBlock);
  GTEST_LOG_(INFO) << "3 -> 4 nodes: origin GETs " << gets << " for " << blocks << " blocks ("
                   << static_cast<double>(gets) / static_cast<double>(blocks) << "x); node 3 took "
                   << Metric(3, "granary_cluster_handover_blocks_total")
                   << " blocks over from the previous owners";
  EXPECT_EQ(gets, blocks);
  EXPECT_GT(Metric(3, "granary_cluster_handover_blocks_total"), 0);
}

TEST_F(ElasticClusterTest, AGracefulLeaveMidEpochCostsNoOriginRead) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(StartNode(i).ok()) << nodes_[i].LogTail();
  WaitForSettled({0, 1, 2, 3}, 4);
  ExpectClean(ReadOn({0}));  // every block now has its owner's copy
  const uint64_t before = OriginGets();

  // An epoch on node 1; node 3 leaves (SIGTERM: it drains) a third of the
  // way through, while the epoch goes on.
  std::atomic<bool> left{false};
  std::thread leaving;
  ExpectClean(ReadOn({1}, [&](int, uint64_t n) {
    if (n == keys_.size() / 3 && !left.exchange(true)) {
      leaving = std::thread([&] { nodes_[3].Stop(); });
    }
  }));
  ASSERT_TRUE(left.load());
  leaving.join();
  WaitForSettled({0, 1, 2}, 3);
  // Node 2 holds only its own share: the rest it reads from the owners,
  // node 3's former share from its new owners.
  ExpectClean(ReadOn({0, 1, 2}));
  const uint64_t gets = OriginGets() - before;
  double taken = 0;
  for (int i = 0; i < 3; ++i) taken += Metric(i, "granary_cluster_handover_blocks_total");
  GTEST_LOG_(INFO) << "4 -> 3 nodes by a graceful leave: origin GETs " << gets
                   << " after it; the others took " << taken << " blocks over";
  EXPECT_EQ(gets, 0u);
  EXPECT_GT(taken, 0);
}

TEST_F(ElasticClusterTest, ANodeBackOnItsDiskAtAnotherAddressKeepsItsShare) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(StartNode(i).ok()) << nodes_[i].LogTail();
  WaitForSettled({0, 1, 2}, 3);
  const uint64_t before = OriginGets();
  ExpectClean(ReadOn({0}));
  EXPECT_EQ(OriginGets() - before, testing::BlocksOf(*data_, kBlock));

  // Killed, and back (a rescheduled pod with the same volume) at a new port.
  const uint64_t after_load = OriginGets();
  const double views0 = Metric(0, "granary_cluster_views_total");
  const double views1 = Metric(1, "granary_cluster_views_total");
  nodes_[2].Crash();
  nodes_[2].cluster_port = net_->PortFor(2, 7001);
  ASSERT_TRUE(StartNode(2).ok()) << nodes_[2].LogTail();
  // The others have seen its new address (a new view) and settled.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       std::chrono::steady_clock::now() < until &&
       (Metric(0, "granary_cluster_views_total") <= views0 ||
        Metric(1, "granary_cluster_views_total") <= views1);) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling daemons' metrics
  }
  WaitForSettled({0, 1, 2}, 3);
  ExpectClean(ReadOn({1, 2}));
  const uint64_t gets = OriginGets() - after_load;
  GTEST_LOG_(INFO) << "node 2 back at another address: origin GETs " << gets
                   << ", blocks it took over "
                   << Metric(2, "granary_cluster_handover_blocks_total");
  EXPECT_EQ(gets, 0u);
  EXPECT_EQ(Metric(2, "granary_cluster_handover_blocks_total"), 0);
}

TEST_F(ElasticClusterTest, StaticMembersGrowByARewrittenPeersFileWithoutASecondOriginRead) {
  const std::string peers = dir_.path() + "/peers";
  WritePeers(peers, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(StartStaticNode(i, peers).ok()) << nodes_[i].LogTail();
  WaitForSettled({0, 1, 2}, 3);
  const uint64_t before = OriginGets();
  ExpectClean(ReadOn({0, 1, 2}));

  // The next epoch on the three; a third of the way through, the file
  // names a fourth node, which starts, and the three read it again.
  std::atomic<bool> grown{false};
  Status join;
  ExpectClean(ReadOn({0, 1, 2}, [&](int node, uint64_t n) {
    if (node != 0 || n != keys_.size() / 3 || grown.exchange(true)) return;
    WritePeers(peers, 4);
    join = StartStaticNode(3, peers);
    for (int i = 0; i < 3; ++i) ::kill(nodes_[i].pid, SIGHUP);
  }));
  ASSERT_TRUE(grown.load());
  ASSERT_TRUE(join.ok()) << join.ToString() << nodes_[3].LogTail();
  WaitForSettled({0, 1, 2, 3}, 4);
  ExpectClean(ReadOn({0, 1, 2, 3}));

  const uint64_t gets = OriginGets() - before;
  const uint64_t blocks = testing::BlocksOf(*data_, kBlock);
  GTEST_LOG_(INFO) << "static 3 -> 4 nodes by SIGHUP: origin GETs " << gets << " for " << blocks
                   << " blocks; node 3 took " << Metric(3, "granary_cluster_handover_blocks_total")
                   << " blocks over from the previous owners";
  EXPECT_EQ(gets, blocks);
  EXPECT_GT(Metric(3, "granary_cluster_handover_blocks_total"), 0);
}

TEST_F(ElasticClusterTest, AWorkerAskedToDrainLeavesMidEpochWithoutAnOriginRead) {
  nodes_[3].worker = true;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(StartNode(i).ok()) << nodes_[i].LogTail();
  WaitForSettled({0, 1, 2, 3}, 4);
  ExpectClean(ReadOn({0}));  // every block now has its owner's copy
  const uint64_t before = OriginGets();

  // An epoch on node 1; the worker is asked to drain a third of the way
  // through, while the epoch goes on.
  std::atomic<bool> asked{false};
  std::thread draining;
  testing::ProcessResult drain;
  ExpectClean(ReadOn({1}, [&](int, uint64_t n) {
    if (n != keys_.size() / 3 || asked.exchange(true)) return;
    draining = std::thread([&] {
      drain = testing::RunProcess({GRANARY_CLI_PATH, "worker", "--drain", nodes_[3].source,
                                   "--run-dir", nodes_[3].run_dir()},
                                  std::chrono::seconds(60));
    });
  }));
  ASSERT_TRUE(asked.load());
  draining.join();
  GTEST_LOG_(INFO) << "granary worker --drain:\n" << drain.out << drain.err;
  EXPECT_EQ(drain.exit_code, 0) << drain.err;
  EXPECT_NE(drain.out.find("drain: drained"), std::string::npos) << drain.out;
  EXPECT_FALSE(nodes_[3].Running());
  WaitForSettled({0, 1, 2}, 3);
  ExpectClean(ReadOn({0, 1, 2}));
  EXPECT_EQ(OriginGets() - before, 0u);
}

}  // namespace
}  // namespace granary
