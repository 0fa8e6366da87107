// The engine's block sources in a cluster, with a fake cluster source: a block
// another node owns comes from the cluster and is kept as a near copy; a
// cluster that cannot supply it sends the read to the origin; a peer's
// request never goes back to the cluster; warm-up of another node's object
// asks that node instead of fetching here; a reader asks the owner on its
// own thread.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cache/engine.h"
#include "dataset/dataset.h"
#include "testing/mem_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

// Owns the keys in `owned`; serves other blocks from `peer_bytes` unless
// `down`; the earlier owners of a handover hold `previous_bytes`.
class FakeCluster : public ClusterSource {
 public:
  std::set<std::string> owned;
  std::map<std::string, std::string> peer_bytes;      // key -> whole object
  std::map<std::string, std::string> previous_bytes;  // key -> whole object
  std::atomic<int> previous_reads{0};
  std::atomic<bool> down{false};
  std::atomic<int> reads{0}, warms{0};
  std::mutex mu;
  std::thread::id reader_thread;  // of the last ReadFromOwner

  std::string_view name() const override { return "fake-peer"; }
  bool Owns(const ObjectKey& key, uint64_t) const override { return owned.count(key.key) > 0; }
  bool IsPrimary(const ObjectKey& key, uint64_t block) const override { return Owns(key, block); }
  Result<BlockData> ReadFromOwner(const BlockRef& ref, Priority, bool* next_in_line) override {
    ++reads;
    {
      std::lock_guard lock(mu);
      reader_thread = std::this_thread::get_id();
    }
    *next_in_line = down;  // the owner is down and this node comes next
    if (down) return Unavailable("peer down");
    auto it = peer_bytes.find(ref.key.key);
    if (it == peer_bytes.end()) return NotFound("not there");
    return BlockData(BlockBuffer::Adopt(it->second.substr(ref.offset, ref.length)));
  }
  Result<BlockData> ReadFromPrevious(const BlockRef& ref, Priority) override {
    ++previous_reads;
    auto it = previous_bytes.find(ref.key.key);
    if (it == previous_bytes.end()) return NotFound("no earlier owner holds it");
    return BlockData(BlockBuffer::Adopt(it->second.substr(ref.offset, ref.length)));
  }
  Result<bool> WarmRemote(const ObjectKey& key) override {
    ++warms;
    if (down) return NotFound("no live owner");
    return true;
  }
};

class EngineClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("granary-engine-cluster-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ufs_ = std::make_shared<testing::MemUfs>("mem://bkt");
    for (int i = 0; i < 4; ++i) {
      bodies_["f" + std::to_string(i)] = std::string(5000 + i, static_cast<char>('a' + i));
      ufs_->Put("ds/f" + std::to_string(i), bodies_["f" + std::to_string(i)]);
    }
    DatasetOptions o;
    o.source = "s3://bkt/ds";
    o.cache_dirs = {TierLevel{.path = dir_.string(), .quota = quota_}};
    o.store_background = false;
    auto ds = Dataset::Open(std::move(o), ufs_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    ds_ = std::move(*ds);
    cluster_ = std::make_shared<FakeCluster>();
    cluster_->owned = {"ds/f0", "ds/f1"};
    cluster_->peer_bytes = {{"ds/f2", bodies_["f2"]}, {"ds/f3", bodies_["f3"]}};
    ds_->engine().SetCluster(cluster_);
  }
  void TearDown() override {
    ds_.reset();
    fs::remove_all(dir_);
  }
  uint64_t Ino(const std::string& path) { return ds_->snapshot()->FindPath(path).value_or(0); }
  std::string Read(const std::string& path) {
    std::string out(10000, '\0');
    auto n = ds_->engine().Read(Ino(path), 0, std::span<char>(out.data(), out.size()));
    EXPECT_TRUE(n.ok()) << path << ": " << n.status().ToString();
    out.resize(n.ok() ? *n : 0);
    return out;
  }
  ObjectKey Key(const std::string& path) {
    auto snap = ds_->snapshot();
    return ds_->engine().KeyOf(*snap, *snap->Get(Ino(path)));
  }

  uint64_t quota_ = 64 << 20;
  fs::path dir_;
  std::shared_ptr<testing::MemUfs> ufs_;
  std::map<std::string, std::string> bodies_;
  std::unique_ptr<Dataset> ds_;
  std::shared_ptr<FakeCluster> cluster_;
};

TEST_F(EngineClusterTest, OwnedFromOriginOthersFromTheirOwnerKeptAsNearCopies) {
  EXPECT_EQ(Read("f0"), bodies_["f0"]);  // owned here: origin
  EXPECT_EQ(Read("f2"), bodies_["f2"]);  // owned elsewhere: the peer
  const EngineStats s = ds_->engine().stats();
  EXPECT_EQ(s.origin_requests, 1u);
  EXPECT_EQ(s.peer_blocks, 1u);
  EXPECT_EQ(cluster_->reads.load(), 1) << "an owned block never asks the cluster";
  {
    std::lock_guard lock(cluster_->mu);
    EXPECT_EQ(cluster_->reader_thread, std::this_thread::get_id())
        << "a reader asks the owner itself: its bytes come without a hop through a fetch thread";
  }
  ds_->store().Checkpoint().IgnoreError();
  // Admission runs off the read path; the near copy lands eventually.
  for (int i = 0; i < 200 && !ds_->store().Contains(Key("f2")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(ds_->store().Contains(Key("f2")));
  EXPECT_EQ(ds_->engine().stats().near_admitted, 1u);
}

// After a membership change, a block this node now owns comes from the
// node that owned it before, not from the origin; the background pull keeps
// it as owned data and never reads the origin; a handover request is served
// only from what this node holds.
TEST_F(EngineClusterTest, AHandoverTakesOwnedBlocksFromTheirEarlierOwnerNotTheOrigin) {
  cluster_->previous_bytes = {{"ds/f0", bodies_["f0"]}, {"ds/f1", bodies_["f1"]}};
  EXPECT_EQ(Read("f0"), bodies_["f0"]);
  EXPECT_EQ(ds_->engine().stats().origin_requests, 0u);

  auto pulled = ds_->engine().PullFromPrevious(Key("f1"), 0);
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  EXPECT_TRUE(*pulled);
  EXPECT_TRUE(ds_->store().Contains(Key("f1")));
  cluster_->owned.insert("ds/f3");  // owned now, held by no earlier owner
  auto absent = ds_->engine().PullFromPrevious(Key("f3"), 0);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(*absent);
  EXPECT_FALSE(ds_->store().Contains(Key("f3")));
  EXPECT_EQ(ds_->engine().stats().origin_requests, 0u) << "a handover never reads the origin";

  auto served = ds_->engine().ServeCached(Key("f1"), 0);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->length, bodies_["f1"].size());
  if (served->fd >= 0) ::close(served->fd);
  EXPECT_EQ(ds_->engine().ServeCached(Key("f2"), 0).status().code(), Code::kNotFound);
  EXPECT_EQ(ds_->engine().stats().origin_requests, 0u) << "a handover request fetches nothing";
}

// Records what the engine pushes into "the mount's page cache".
struct PushLog {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<uint64_t, std::string>> pushed;  // (offset, bytes)
  std::thread::id pusher;
  CacheEngine::FetchedHook Hook() {
    return [this](const Snapshot&, uint64_t, uint64_t offset, std::string_view bytes) {
      std::lock_guard lock(mu);
      pushed.emplace_back(offset, std::string(bytes));
      pusher = std::this_thread::get_id();
      cv.notify_all();
      return true;
    };
  }
};

// A near copy the store keeps needs no push: the reader's next READs find it.
TEST_F(EngineClusterTest, AKeptNearCopyIsNotPushed) {
  PushLog log;
  ds_->engine().SetFetchedHook(log.Hook());
  EXPECT_EQ(Read("f2"), bodies_["f2"]);
  for (int i = 0; i < 200 && !ds_->store().Contains(Key("f2")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(ds_->store().Contains(Key("f2")));
  std::lock_guard lock(log.mu);
  EXPECT_TRUE(log.pushed.empty());
}

// A cache with room for one object: the near copy is refused.
class EngineClusterSmallCacheTest : public EngineClusterTest {
 protected:
  EngineClusterSmallCacheTest() { quota_ = 8192; }
};

// A block read from its owner that the store refuses to keep (near copies
// use free space only) goes to the mount's page cache whole, as bytes
// fetched ahead do, or each later READ of it would ask the owner again. The
// push never runs on the reader's thread (its READ's pages stay locked until
// it replies: a push from there would deadlock).
TEST_F(EngineClusterSmallCacheTest, ARefusedNearCopyGoesToTheMountWholeFromAnotherThread) {
  PushLog log;
  ds_->engine().SetFetchedHook(log.Hook());
  EXPECT_EQ(Read("f0"), bodies_["f0"]);  // owned: fills the cache
  for (int i = 0; i < 200 && !ds_->store().Contains(Key("f0")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(ds_->store().Contains(Key("f0")));
  std::string part(1000, '\0');
  auto n = ds_->engine().Read(Ino("f2"), 0, std::span<char>(part.data(), part.size()));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(part, bodies_["f2"].substr(0, 1000));
  std::unique_lock lock(log.mu);
  ASSERT_TRUE(log.cv.wait_for(lock, std::chrono::seconds(10), [&] { return !log.pushed.empty(); }));
  ASSERT_EQ(log.pushed.size(), 1u);
  EXPECT_EQ(log.pushed[0].first, 0u);
  EXPECT_EQ(log.pushed[0].second, bodies_["f2"]);
  EXPECT_NE(log.pusher, std::this_thread::get_id()) << "pushed from the reader's own thread";
  EXPECT_FALSE(ds_->store().Contains(Key("f2")));
}

TEST_F(EngineClusterTest, DeadOwnerMeansTheOriginNotAFailedRead) {
  cluster_->down = true;
  EXPECT_EQ(Read("f3"), bodies_["f3"]);
  const EngineStats s = ds_->engine().stats();
  EXPECT_EQ(s.read_errors, 0u);
  EXPECT_EQ(s.origin_requests, 1u);
  EXPECT_EQ(s.peer_fallbacks, 1u);
  // This node came next in line: it keeps the block as owned data.
  for (int i = 0; i < 200 && !ds_->store().Contains(Key("f3")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(ds_->store().Contains(Key("f3")));
  EXPECT_EQ(ds_->engine().stats().near_admitted, 0u);
}

TEST_F(EngineClusterTest, PeerRequestsUseTheOriginNeverTheCluster) {
  auto served = ds_->engine().ServePeer(Key("f3"), 0);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  ASSERT_TRUE(served->bytes);
  EXPECT_EQ(served->bytes->view(), bodies_["f3"]);
  EXPECT_EQ(cluster_->reads.load(), 0);
  EXPECT_EQ(ds_->engine().stats().origin_requests, 1u);
  // Once cached, a peer gets the cache file itself.
  for (int i = 0; i < 200 && !ds_->store().Contains(Key("f3")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto again = ds_->engine().ServePeer(Key("f3"), 0);
  ASSERT_TRUE(again.ok());
  EXPECT_GE(again->fd, 0);
  EXPECT_EQ(again->length, bodies_["f3"].size());
  ::close(again->fd);
  EXPECT_EQ(ds_->engine().stats().origin_requests, 1u);
  // A block of another dataset is refused.
  ObjectKey other = Key("f3");
  other.dataset = "someone-else";
  EXPECT_EQ(ds_->engine().ServePeer(other, 0).status().code(), Code::kInvalidArgument);
}

TEST_F(EngineClusterTest, WarmUpOfAnotherNodesObjectAsksThatNode) {
  auto r = ds_->engine().Fetch(Ino("f2"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(cluster_->warms.load(), 1);
  EXPECT_FALSE(ds_->store().Contains(Key("f2"))) << "the owner keeps it, not this node";
  EXPECT_EQ(ds_->engine().stats().origin_requests, 0u);
  // The owner being unreachable: fetched here instead.
  cluster_->down = true;
  r = ds_->engine().Fetch(Ino("f3"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(ds_->store().Contains(Key("f3")));
}

}  // namespace
}  // namespace granary
