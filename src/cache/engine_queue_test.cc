// Bounded memory and each block fetched once: admissions waiting for a cache
// disk slower than the origin stay under admission_queue_bytes and slow the
// fetches down instead of dropping blocks; readahead stays within its memory;
// sequential, random and warm-up readers of one object fetch each block once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
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
        .policy = std::move(policy),
        .block_size = kBlock,
        .background = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    options.dataset = "ds";
    engine_ = std::make_unique<CacheEngine>(ufs_, snapshot_, store_.get(), options);
  }

  // Reads buf.size() bytes of `path` at `off` through the engine; true when
  // the read succeeds and returns exactly the object's bytes there.
  bool ReadsRight(const std::string& path, uint64_t off, std::string& buf) {
    auto n = engine_->Read(Ino(path), off, std::span<char>(buf));
    return n.ok() &&
           std::string_view(buf.data(), *n) == std::string_view(objects_.at(path)).substr(off, *n);
  }

  // Caches `path` whole, then starts a new engine with `options` over the
  // same store: a fresh mount over a warm cache.
  void WarmThenRemount(const std::string& path, EngineOptions options) {
    auto warmed = engine_->Fetch(Ino(path));
    ASSERT_TRUE(warmed.ok() && *warmed);
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

// A cache disk slower than the origin: fetched blocks waiting for admission
// never take more than admission_queue_bytes of memory, the fetches wait for
// room instead of dropping blocks, so every block read ends up cached, every
// read returns the right bytes, and nothing is fetched twice.
TEST_F(EngineQueueTest, ASlowCacheDiskSlowsFetchesAndNoFetchedBlockIsDropped) {
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
  // Every fetched block is admitted: no flight is left hanging, none dropped.
  Eventually([&] { return engine_->stats().admitted == kFiles; });
  const EngineStats s = engine_->stats();
  EXPECT_LE(peak.load(), kCap);
  EXPECT_GT(s.admission_waits, 0u);  // the disk was the bottleneck
  EXPECT_EQ(s.not_admitted + s.admit_errors, 0u);
  EXPECT_EQ(s.admission_pending_bytes, 0u);
  EXPECT_EQ(s.origin_requests, static_cast<uint64_t>(kFiles));
  for (int i = 0; i < kFiles; ++i)
    EXPECT_TRUE(engine_->IsCached(Ino("f/" + std::to_string(i)))) << i;
  store_->SetOwnershipOracle(nullptr);
}

// Counts origin reads per offset of one object (MemUfs read hook).
struct OriginReads {
  std::mutex mu;
  std::map<uint64_t, int> by_offset;
  void Hook(testing::MemUfs& ufs) {
    ufs.SetReadHook([this](std::string_view, uint64_t offset) {
      std::lock_guard lock(mu);
      ++by_offset[offset];
      return Status::Ok();
    });
  }
  int Max() {
    std::lock_guard lock(mu);
    int m = 0;
    for (auto& [off, n] : by_offset) m = std::max(m, n);
    return m;
  }
  size_t Distinct() {
    std::lock_guard lock(mu);
    return by_offset.size();
  }
};

// A sequential reader making many small reads: readahead keeps blocks ahead
// of it, each block is fetched from the origin once, and the whole object
// ends up cached.
TEST_F(EngineQueueTest, ASequentialReaderFetchesEachBlockOnceAndLeavesTheObjectCached) {
  constexpr uint64_t kBlocks = 64;
  Put("big", RandomBytes(kBlocks * kBlock, 7));
  Open(EngineOptions{.readahead_blocks = 8});
  OriginReads reads;
  reads.Hook(*ufs_);
  const uint64_t ino = Ino("big");
  std::string buf(16 << 10, '\0');
  for (uint64_t off = 0; off < kBlocks * kBlock; off += buf.size()) {
    ASSERT_TRUE(ReadsRight("big", off, buf)) << off;
  }
  Eventually([&] { return engine_->IsCached(ino); });
  EXPECT_EQ(reads.Max(), 1);
  EXPECT_EQ(reads.Distinct(), kBlocks);
  const EngineStats s = engine_->stats();
  EXPECT_GT(s.readahead_started, kBlocks / 2);  // most blocks came ahead of the reader
  EXPECT_EQ(s.readahead_dropped, 0u);
  engine_.reset();  // readahead finished before the hook's captures go
}

// A random reader, a sequential reader and a warm-up on one object: each
// block still leaves the origin once.
TEST_F(EngineQueueTest, RandomSequentialAndWarmUpReadersFetchEachBlockOnce) {
  constexpr uint64_t kBlocks = 48;
  Put("big", RandomBytes(kBlocks * kBlock, 9));
  Open(EngineOptions{.readahead_blocks = 8});
  OriginReads reads;
  reads.Hook(*ufs_);
  const uint64_t ino = Ino("big");
  const std::string& want = objects_["big"];
  std::atomic<int> wrong{0};
  std::thread sequential([&] {
    std::string buf(32 << 10, '\0');
    for (uint64_t off = 0; off < want.size(); off += buf.size()) {
      if (!ReadsRight("big", off, buf)) wrong.fetch_add(1);
    }
  });
  std::thread random([&] {
    std::mt19937_64 rng(5);
    std::string buf(8 << 10, '\0');
    for (int i = 0; i < 400; ++i) {
      const uint64_t off = rng() % (want.size() - buf.size());
      if (!ReadsRight("big", off, buf)) wrong.fetch_add(1);
    }
  });
  auto warmed = engine_->Fetch(ino);
  sequential.join();
  random.join();
  ASSERT_TRUE(warmed.ok()) << warmed.status().ToString();
  EXPECT_TRUE(*warmed);
  EXPECT_EQ(wrong.load(), 0);
  Eventually([&] { return engine_->IsCached(ino); });
  EXPECT_EQ(reads.Max(), 1);
  EXPECT_EQ(reads.Distinct(), kBlocks);
  engine_.reset();
}

// A warm-up of a large object keeps several blocks in flight (a slow origin
// answers them in parallel), each block once, and ends with it all cached.
TEST_F(EngineQueueTest, AWarmUpOfALargeObjectKeepsSeveralBlocksInFlight) {
  constexpr uint64_t kBlocks = 24;
  Put("big", RandomBytes(kBlocks * kBlock, 13));
  Open(EngineOptions{.readahead_blocks = 4});
  std::mutex mu;
  std::map<uint64_t, int> reads;
  int in_flight = 0, peak = 0;
  ufs_->SetReadHook([&](std::string_view, uint64_t offset) {
    {
      std::lock_guard lock(mu);
      ++reads[offset];
      peak = std::max(peak, ++in_flight);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard lock(mu);
    --in_flight;
    return Status::Ok();
  });
  auto warmed = engine_->Fetch(Ino("big"));
  ASSERT_TRUE(warmed.ok()) << warmed.status().ToString();
  EXPECT_TRUE(*warmed);
  EXPECT_TRUE(engine_->IsCached(Ino("big")));
  engine_.reset();  // every fetch done before the hook's captures go
  EXPECT_GT(peak, 1);
  EXPECT_LE(peak, 5);  // the block being loaded and the 4 ahead of it
  EXPECT_EQ(reads.size(), kBlocks);
  for (const auto& [offset, n] : reads) EXPECT_EQ(n, 1) << offset;
}

// A fresh mount over a warm cache: readahead reads the cached blocks ahead
// of a sequential reader from the store, whole, and hands each to the mount
// (the fetched hook) once; nothing comes from the origin.
TEST_F(EngineQueueTest, ReadaheadPushesCachedBlocksAheadOfTheReaderOnce) {
  constexpr uint64_t kBlocks = 16;
  Put("big", RandomBytes(kBlocks * kBlock, 17));
  Open(EngineOptions{.readahead_blocks = 4});
  // The remount, with a mount that takes pushed bytes.
  ASSERT_NO_FATAL_FAILURE(WarmThenRemount("big", EngineOptions{.readahead_blocks = 4}));
  std::mutex mu;
  std::map<uint64_t, int> pushed;
  bool bytes_right = true;
  const std::string& want = objects_["big"];
  engine_->SetFetchedHook([&](const Snapshot&, uint64_t, uint64_t offset, std::string_view bytes) {
    std::lock_guard lock(mu);
    ++pushed[offset];
    bytes_right &= bytes == std::string_view(want).substr(offset, bytes.size());
    return true;
  });
  std::string buf(kBlock / 8, '\0');
  for (uint64_t off = 0; off < kBlocks * kBlock; off += buf.size()) {
    ASSERT_TRUE(ReadsRight("big", off, buf)) << off;
  }
  const EngineStats s = engine_->stats();
  engine_.reset();  // every readahead done before the hook's captures go
  EXPECT_EQ(s.origin_requests, 0u);
  EXPECT_TRUE(bytes_right);
  EXPECT_GE(pushed.size(), kBlocks - 1);  // every block after the first, at least
  for (const auto& [offset, n] : pushed) EXPECT_EQ(n, 1) << offset;
}

// A fresh mount over a warm cache: a READ of a block that readahead is
// reading from the store, or pushing into the mount's page cache, takes the
// bytes of that read instead of reading the cache file a second time behind
// it. Here the push of every block is held until the reader is done, so each
// of its reads finds its block in flight: the store reads the object exactly
// once, in whole blocks, and every read returns the object's bytes.
TEST_F(EngineQueueTest, AReadOfABlockBeingReadAheadTakesThoseBytesAndTheFileIsReadOnce) {
  constexpr uint64_t kBlocks = 16;
  Put("big", RandomBytes(kBlocks * kBlock, 23));
  Open(EngineOptions{.readahead_blocks = 4});
  ASSERT_NO_FATAL_FAILURE(WarmThenRemount("big", EngineOptions{.readahead_blocks = 4}));
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  int pushes = 0;
  engine_->SetFetchedHook([&](const Snapshot&, uint64_t, uint64_t, std::string_view) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return released; });
    ++pushes;
    return true;
  });
  const uint64_t store_bytes_before = store_->stats().hit_bytes;
  std::string buf(kBlock / 4, '\0');
  for (uint64_t off = 0; off < kBlocks * kBlock; off += buf.size()) {
    ASSERT_TRUE(ReadsRight("big", off, buf)) << off;
  }
  const uint64_t store_bytes = store_->stats().hit_bytes - store_bytes_before;
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  const EngineStats s = engine_->stats();
  engine_.reset();  // every push done before the hook's captures go
  EXPECT_EQ(s.origin_requests, 0u);
  EXPECT_EQ(store_bytes, kBlocks * kBlock);
  EXPECT_EQ(pushes, static_cast<int>(kBlocks));
}

// A load on a fresh mount over a warm cache: PushCached puts each block of a
// cached object into the mount's page cache once, from the store, with the
// object's bytes; a second call pushes nothing, and an object not cached is
// not pushed (nor fetched).
TEST_F(EngineQueueTest, PushCachedPutsEachCachedBlockIntoThePageCacheOnce) {
  constexpr uint64_t kBlocks = 5;
  Put("big", RandomBytes(kBlocks * kBlock - 100, 29));
  Put("cold", RandomBytes(kBlock / 2, 30));
  Open(EngineOptions{});
  ASSERT_NO_FATAL_FAILURE(WarmThenRemount("big", EngineOptions{}));
  EXPECT_FALSE(engine_->PushCached(snapshot_, Ino("big")));  // no mount to push into
  std::map<uint64_t, std::string> pushed;
  engine_->SetFetchedHook([&](const Snapshot&, uint64_t, uint64_t offset, std::string_view bytes) {
    pushed[offset] += std::string(bytes);
    return true;
  });
  EXPECT_TRUE(engine_->PushCached(snapshot_, Ino("big")));
  EXPECT_FALSE(engine_->PushCached(snapshot_, Ino("big")));
  EXPECT_FALSE(engine_->PushCached(snapshot_, Ino("cold")));
  ASSERT_EQ(pushed.size(), kBlocks);
  std::string all;
  for (const auto& [offset, bytes] : pushed) {
    EXPECT_EQ(offset, all.size());
    all += bytes;
  }
  EXPECT_EQ(all, objects_["big"]);
  EXPECT_EQ(engine_->stats().origin_requests, 0u);
}

// Readahead memory bounds the bytes fetched ahead: with room for two blocks,
// a reader whose origin stalls past block 3 never has more than two blocks
// of readahead in flight, and its reads succeed once the origin answers.
TEST_F(EngineQueueTest, ReadaheadStaysWithinItsMemory) {
  Put("big", RandomBytes(32 * kBlock, 11));
  Open(EngineOptions{.readahead_blocks = 16, .readahead_memory_bytes = 2 * kBlock});
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  ufs_->SetReadHook([&](std::string_view, uint64_t offset) {
    if (offset < 3 * kBlock) return Status::Ok();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return released; });
    return Status::Ok();
  });
  const uint64_t ino = Ino("big");
  std::string buf(kBlock / 4, '\0');
  for (uint64_t off = 0; off < 3 * kBlock; off += buf.size()) {
    auto r = engine_->Read(ino, off, std::span<char>(buf));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_LE(engine_->stats().readahead_pending_bytes, 2 * kBlock);
  EXPECT_GT(engine_->stats().readahead_dropped, 0u);
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  std::string all(32 * kBlock, '\0');
  auto n = engine_->Read(ino, 0, std::span<char>(all));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(all, objects_["big"]);
  engine_.reset();  // readahead finished before the hook's captures go
}

}  // namespace
}  // namespace granary
