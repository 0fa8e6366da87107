// Issue 23, bounded queues: admissions waiting for a cache disk slower than
// the origin stay under admission_queue_bytes (reads still succeed, the rest
// is counted in admit_skipped), and a sequential reader queues each readahead
// block once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "cache/engine.h"
#include "testing/mem_ufs.h"
#include "testing/random_bytes.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlock = 64 << 10;

using testing::RandomBytes;

// A dataset in MemUfs (a fast origin), its snapshot and a store in a temp dir.
class EngineQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("granary-engine-queue-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "cache");
    ufs_ = std::make_shared<testing::MemUfs>("mem://bkt");
  }
  void TearDown() override {
    engine_.reset();
    ufs_->SetReadHook(nullptr);
    store_.reset();
    fs::remove_all(dir_);
  }

  void Put(const std::string& path, std::string data) {
    objects_[path] = data;
    ufs_->Put("ds/" + path, std::move(data));
  }

  void Open(EngineOptions options, uint64_t quota = 1ull << 30, std::string policy = "lru") {
    auto snap =
        Snapshot::Build(*ufs_, SnapshotOptions{.source_uri = "mem://bkt/ds", .prefix = "ds"},
                        (dir_ / "snapshot").string(), 1);
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    snapshot_ = std::move(*snap);
    auto store = Store::Open(StoreOptions{
        .tiers = {TierLevel{
            .medium = Medium::kSsd, .path = (dir_ / "cache").string(), .quota = quota}},
        .policy = policy,
        .block_size = kBlock,
        .background = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    options.dataset = "ds";
    engine_ = std::make_unique<CacheEngine>(ufs_, snapshot_, store_.get(), options);
  }

  uint64_t Ino(const std::string& path) {
    auto ino = snapshot_->FindPath(path);
    EXPECT_TRUE(ino.has_value()) << path;
    return ino.value_or(0);
  }

  fs::path dir_;
  std::shared_ptr<testing::MemUfs> ufs_;
  std::map<std::string, std::string> objects_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CacheEngine> engine_;
};

template <typename Pred>
void Eventually(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// Issue 23: with a cache disk slower than the origin, fetched blocks waiting
// for admission never take more than admission_queue_bytes of memory; the
// blocks past it are not cached (admit_skipped), every read still returns the
// right bytes, and every flight completes.
TEST_F(EngineQueueTest, Issue23AdmissionsWaitingForASlowCacheDiskStayUnderTheCap) {
  constexpr int kFiles = 300;
  constexpr uint64_t kCap = 8 * kBlock;
  for (int i = 0; i < kFiles; ++i) Put("f/" + std::to_string(i), RandomBytes(kBlock, i));
  Open(EngineOptions{.admission_threads = 1, .admission_queue_bytes = kCap});
  // The slow disk: every admission takes 3 ms (the store asks the block
  // ownership oracle once per admitted block) and samples the queue.
  std::atomic<uint64_t> peak{0};
  CacheEngine* engine = engine_.get();
  store_->SetOwnershipOracle(nullptr, [&peak, engine](const ObjectKey&, uint64_t) {
    const uint64_t now = engine->stats().admission_pending_bytes;
    uint64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return true;
  });

  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::string buf(kBlock, '\0');
      for (int i = t; i < kFiles; i += 4) {
        const std::string path = "f/" + std::to_string(i);
        auto n = engine_->Read(Ino(path), 0, std::span<char>(buf));
        if (!n.ok() || *n != kBlock || buf != objects_[path]) wrong.fetch_add(1);
      }
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  // Every fetched block was admitted or skipped: no flight is left hanging.
  Eventually([&] {
    const EngineStats s = engine_->stats();
    return s.admitted + s.not_admitted + s.admit_errors + s.admit_skipped == kFiles;
  });
  const EngineStats s = engine_->stats();
  EXPECT_LE(peak.load(), kCap);
  EXPECT_GT(s.admit_skipped, 0u);
  EXPECT_EQ(s.admission_pending_bytes, 0u);
  // Skipped blocks are simply fetched again.
  std::string buf(kBlock, '\0');
  for (int i = 0; i < kFiles; i += 7) {
    const std::string path = "f/" + std::to_string(i);
    auto n = engine_->Read(Ino(path), 0, std::span<char>(buf));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(buf, objects_[path]);
  }
  store_->SetOwnershipOracle(nullptr);
}

// Issue 23: a sequential reader making many small reads asks for the same
// readahead blocks again and again while they wait in the readahead queue;
// each is queued once. (The cache refuses the object, so that every read
// misses and asks for readahead.)
TEST_F(EngineQueueTest, Issue23SequentialReaderQueuesEachReadaheadBlockOnce) {
  Put("big", RandomBytes(16 * kBlock, 7));
  const uint64_t small_quota = 8 * kBlock;  // half the object: "training" refuses it
  Open(EngineOptions{.readahead_blocks = 4}, small_quota, "training");
  // Origin reads past block 0 wait until released: the two readahead threads
  // sit on blocks 1 and 2, blocks 3 and 4 stay queued.
  std::mutex mu;
  std::condition_variable cv;
  int blocked = 0;
  bool released = false;
  ufs_->SetReadHook([&](std::string_view, uint64_t offset) {
    if (offset < kBlock) return Status::Ok();
    std::unique_lock lock(mu);
    ++blocked;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
    return Status::Ok();
  });
  const uint64_t ino = Ino("big");
  std::string buf(4096, '\0');
  auto first = engine_->Read(ino, 0, std::span<char>(buf));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return blocked >= 2; });
  }
  for (uint64_t off = 4096; off < 10 * 4096; off += 4096) {
    auto r = engine_->Read(ino, off, std::span<char>(buf));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(buf, objects_["big"].substr(off, 4096));
  }
  EXPECT_EQ(engine_->stats().readahead_queued, 4u);  // blocks 1-4, once each
  EXPECT_EQ(engine_->stats().readahead_dropped, 0u);
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  std::string all(16 * kBlock, '\0');
  auto n = engine_->Read(ino, 0, std::span<char>(all));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(all, objects_["big"]);
  engine_.reset();  // readahead finished before the hook's captures go
}

}  // namespace
}  // namespace granary
