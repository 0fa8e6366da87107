#include "cache/engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "common/cancel.h"
#include "testing/mem_ufs.h"
#include "testing/random_bytes.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

using testing::RandomBytes;

// A dataset in MemUfs, its snapshot and a store in a temp dir.
class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("granary-engine-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "cache");
    ufs_ = std::make_shared<testing::MemUfs>("mem://bkt");
  }
  void TearDown() override {
    engine_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  void Put(const std::string& path, std::string data) {
    objects_[path] = data;
    ufs_->Put("ds/" + path, std::move(data));
  }

  void Open(uint64_t quota = 1ull << 30, std::string policy = "lru", uint64_t block = 64 << 10) {
    engine_.reset();
    store_.reset();
    if (!snapshot_) {
      auto snap =
          Snapshot::Build(*ufs_, SnapshotOptions{.source_uri = "mem://bkt/ds", .prefix = "ds"},
                          (dir_ / "snapshot").string(), 1);
      ASSERT_TRUE(snap.ok()) << snap.status().ToString();
      snapshot_ = std::move(*snap);
    }
    auto store = Store::Open(StoreOptions{
        .tiers = {TierLevel{
            .medium = Medium::kSsd, .path = (dir_ / "cache").string(), .quota = quota}},
        .policy = std::move(policy),
        .block_size = block,
        .background = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    engine_ = std::make_unique<CacheEngine>(ufs_, snapshot_, store_.get(),
                                            EngineOptions{.dataset = "ds",
                                                          .origin_concurrency = origin_concurrency_,
                                                          .origin_timeout = origin_timeout_});
  }
  // For the next Open().
  int origin_concurrency_ = 8;
  std::chrono::milliseconds origin_timeout_ = kDefaultOriginTimeout;

  uint64_t Ino(const std::string& path) {
    auto ino = snapshot_->FindPath(path);
    EXPECT_TRUE(ino.has_value()) << path;
    return ino.value_or(0);
  }

  // Fetch() of `path` succeeds with the file cached.
  void ExpectFetched(const std::string& path, Priority priority) {
    auto fetched = engine_->Fetch(snapshot_, Ino(path), priority);
    ASSERT_TRUE(fetched.ok()) << path << ": " << fetched.status().ToString();
    EXPECT_TRUE(*fetched) << path;
  }

  std::string ReadAll(uint64_t ino, size_t chunk = 1 << 20) {
    std::string out;
    std::string buf(chunk, '\0');
    for (uint64_t off = 0;;) {
      auto n = engine_->Read(ino, off, std::span<char>(buf.data(), buf.size()));
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (!n.ok() || *n == 0) break;
      out.append(buf.data(), *n);
      off += *n;
    }
    return out;
  }

  fs::path dir_;
  std::shared_ptr<testing::MemUfs> ufs_;
  std::map<std::string, std::string> objects_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CacheEngine> engine_;
};

TEST_F(EngineTest, ColdReadFetchesWarmReadDoesNot) {
  for (int i = 0; i < 50; ++i)
    Put("train/c" + std::to_string(i % 5) + "/f" + std::to_string(i) + ".jpg",
        RandomBytes(1000 + i * 997, i));
  Open();
  for (const auto& [path, data] : objects_) EXPECT_EQ(ReadAll(Ino(path)), data) << path;
  auto cold = engine_->stats();
  EXPECT_EQ(cold.origin_requests, 50u);
  engine_.reset();  // drains admissions
  engine_ =
      std::make_unique<CacheEngine>(ufs_, snapshot_, store_.get(), EngineOptions{.dataset = "ds"});
  for (const auto& [path, data] : objects_) EXPECT_EQ(ReadAll(Ino(path)), data) << path;
  auto warm = engine_->stats();
  EXPECT_EQ(warm.origin_requests, 0u);
  EXPECT_EQ(warm.hit_reads, warm.reads - 50);  // each file's final read at EOF returns 0 early
}

TEST_F(EngineTest, ThirtyTwoConcurrentReadersOfOneColdObjectCauseOneOriginRead) {
  Put("big.jpg", RandomBytes(110 << 10, 7));
  Open(1ull << 30, "lru", /*block=*/4 << 20);  // one block: one origin GET
  const uint64_t ino = Ino("big.jpg");
  // Hold the leader's origin read until every other reader has joined its flight.
  ufs_->SetReadHook([this](std::string_view, uint64_t) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (engine_->stats().flight_joins < 31 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    return Status::Ok();
  });
  std::vector<std::thread> readers;
  std::vector<std::string> got(32);
  for (int t = 0; t < 32; ++t) {
    readers.emplace_back([&, t] {
      std::string buf(200 << 10, '\0');
      auto n = engine_->Read(ino, 0, std::span<char>(buf.data(), buf.size()));
      if (n.ok()) got[t] = buf.substr(0, *n);
    });
  }
  for (auto& r : readers) r.join();
  for (const auto& g : got) EXPECT_EQ(g, objects_["big.jpg"]);
  EXPECT_EQ(ufs_->stats().read_requests, 1u);
  EXPECT_EQ(engine_->stats().flight_joins, 31u);
}

TEST_F(EngineTest, MultiBlockObjectsRangedReadsAndFetch) {
  Put("large.bin", RandomBytes((1 << 20) + 12345, 3));  // 17 blocks of 64 KiB
  Put("small.bin", RandomBytes(100, 4));
  Open();
  const uint64_t ino = Ino("large.bin");
  const std::string& data = objects_["large.bin"];
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % (data.size() + 100);
    size_t len = rng() % (200 << 10);
    std::string buf(len, '\0');
    auto n = engine_->Read(ino, off, std::span<char>(buf.data(), buf.size()));
    ASSERT_TRUE(n.ok());
    std::string want = off < data.size() ? data.substr(off, len) : "";
    ASSERT_EQ(buf.substr(0, *n), want) << "off=" << off << " len=" << len;
  }
  auto fetched = engine_->Fetch(ino);
  ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
  EXPECT_TRUE(*fetched);
  EXPECT_TRUE(engine_->IsCached(ino));
  auto fd = engine_->OpenCachedFile(ino);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  std::string file(data.size(), '\0');
  EXPECT_EQ(pread(*fd, file.data(), file.size(), 0), static_cast<ssize_t>(data.size()));
  close(*fd);
  EXPECT_EQ(file, data);
  const uint64_t before = engine_->stats().origin_requests;
  EXPECT_EQ(ReadAll(ino, 100000), data);
  EXPECT_EQ(engine_->stats().origin_requests, before);
  EXPECT_FALSE(engine_->OpenCachedFile(Ino("small.bin")).ok());  // not cached yet
}

TEST_F(EngineTest, OriginErrorFailsOnlyThatRead) {
  Put("bad.jpg", RandomBytes(5000, 1));
  Put("good.jpg", RandomBytes(5000, 2));
  Open();
  ufs_->SetReadHook([](std::string_view key, uint64_t) {
    if (key == "ds/bad.jpg") return Unavailable("mem://bkt/ds/bad.jpg: origin down");
    return Status::Ok();
  });
  std::string buf(8192, '\0');
  auto bad = engine_->Read(Ino("bad.jpg"), 0, std::span<char>(buf.data(), buf.size()));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kUnavailable);
  EXPECT_NE(bad.status().message().find("bad.jpg"), std::string::npos);
  EXPECT_EQ(ReadAll(Ino("good.jpg")), objects_["good.jpg"]);
  ufs_->SetReadHook(nullptr);
  EXPECT_EQ(ReadAll(Ino("bad.jpg")), objects_["bad.jpg"]);  // a later read succeeds
  EXPECT_EQ(engine_->stats().read_errors, 1u);
}

TEST_F(EngineTest, CorruptCacheFileIsRefetchedAfterRestart) {
  Put("x.jpg", RandomBytes(50000, 9));
  Open();
  const uint64_t ino = Ino("x.jpg");
  ASSERT_TRUE(engine_->Fetch(ino).value_or(false));
  auto info = store_->Describe(engine_->KeyOf(*snapshot_->Get(ino)));
  ASSERT_TRUE(info.ok());
  const std::string path = info->path;
  Open();  // restart: close and reopen the store
  {
    int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, "XXXX", 4, 1000), 4);
    close(fd);
  }
  EXPECT_EQ(ReadAll(ino), objects_["x.jpg"]);
  EXPECT_EQ(store_->stats().checksum_failures, 1u);
  EXPECT_EQ(engine_->stats().origin_requests, 1u);
}

TEST_F(EngineTest, FetchReportsWhenTheCacheIsFull) {
  for (int i = 0; i < 20; ++i) Put("f" + std::to_string(i), RandomBytes(40 << 10, i));
  Open(/*quota=*/200 << 10, "training");
  int cached = 0, refused = 0;
  for (int i = 0; i < 20; ++i) {
    auto r = engine_->Fetch(Ino("f" + std::to_string(i)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    (*r ? cached : refused)++;
  }
  EXPECT_GT(cached, 0);
  EXPECT_GT(refused, 0);
  // Refused objects are still readable (served from the origin).
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(ReadAll(Ino("f" + std::to_string(i))), objects_["f" + std::to_string(i)]);
  }
}

// An origin whose reads of the keys it is told to hold block until
// Release(): a stalled origin that accepts the request and never answers.
class StallGate {
 public:
  // Installs the hook on `ufs`: reads of keys containing `pattern` block.
  void Install(testing::MemUfs& ufs, const std::string& pattern) {
    ufs.SetReadHook([this, pattern](std::string_view key, uint64_t) {
      if (key.find(pattern) == std::string_view::npos) return Status::Ok();
      std::unique_lock lock(mu_);
      ++blocked_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
      return Status::Ok();
    });
  }
  // Waits until `n` reads are blocked in the origin.
  void AwaitBlocked(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return blocked_ >= n; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int blocked_ = 0;
  bool released_ = false;
};

// Waits (no timing assert) until `pred` holds.
template <typename Pred>
void Eventually(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// A stalled origin. An interrupted reader leaves with Cancelled
// (EINTR through FUSE) at once; the fetch goes on and another reader of the
// same block gets the bytes once the origin answers.
TEST_F(EngineTest, InterruptedReaderLeavesAndTheFlightCompletesForOthers) {
  Put("stuck", RandomBytes(10 << 10, 1));
  Open();
  StallGate gate;
  gate.Install(*ufs_, "stuck");
  const uint64_t ino = Ino("stuck");
  CancelToken interrupt;
  Result<size_t> first = size_t{0};
  std::string buf1(10 << 10, '\0'), buf2(10 << 10, '\0');
  std::thread a([&] {
    first = engine_->Read(engine_->snapshot(), ino, 0, std::span<char>(buf1), Priority::kHigh,
                          &interrupt);
  });
  gate.AwaitBlocked(1);
  Result<size_t> second = size_t{0};
  std::thread b([&] { second = engine_->Read(ino, 0, std::span<char>(buf2)); });
  Eventually([&] { return engine_->stats().flight_joins == 1; });
  interrupt.Cancel();
  a.join();  // returns although the origin has not answered
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), Code::kCancelled);
  gate.Release();
  b.join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(buf2, objects_["stuck"]);
  EXPECT_EQ(ufs_->stats().read_requests, 1u);
  EXPECT_EQ(engine_->stats().read_waits_ended, 1u);
}

// A source that never answers fails the read after origin_timeout
// instead of hanging; so does a read waiting for an origin permit that the
// stalled requests hold.
TEST_F(EngineTest, DeadlineFiresOnAnOriginThatNeverAnswers) {
  Put("stuck", RandomBytes(10 << 10, 1));
  Put("other", RandomBytes(10 << 10, 2));
  origin_concurrency_ = 1;
  origin_timeout_ = std::chrono::milliseconds(200);
  Open();
  StallGate gate;
  gate.Install(*ufs_, "stuck");
  std::string buf(10 << 10, '\0');
  auto r = engine_->Read(Ino("stuck"), 0, std::span<char>(buf));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("did not answer within 200 ms"), std::string::npos)
      << r.status().ToString();
  // The stalled request still holds the only permit: "other" cannot start.
  gate.AwaitBlocked(1);
  auto o = engine_->Read(Ino("other"), 0, std::span<char>(buf));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), Code::kUnavailable);
  gate.Release();
  // Once the origin answers, both read normally.
  Eventually([&] { return engine_->IsCached(Ino("stuck")); });
  EXPECT_EQ(ReadAll(Ino("stuck")), objects_["stuck"]);
  EXPECT_EQ(ReadAll(Ino("other")), objects_["other"]);
}

// Which thread made each origin read (the MemUfs read hook).
class FetchThreads {
 public:
  void Install(testing::MemUfs& ufs) {
    ufs.SetReadHook([this](std::string_view key, uint64_t) {
      std::lock_guard lock(mu_);
      on_[std::string(key)] = std::this_thread::get_id();
      return Status::Ok();
    });
  }
  size_t keys() {
    std::lock_guard lock(mu_);
    return on_.size();
  }
  // The thread that read `key` (a default id when nothing did).
  std::thread::id Of(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = on_.find(key);
    return it == on_.end() ? std::thread::id() : it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::thread::id> on_;
};

// A warm-up (granary load, mount --load) waits for its fetch and
// the admission anyway, so it fetches on its own thread: no hand-off to a
// fetch thread and back. A demand read still fetches on a fetch thread (it
// must be able to stop waiting: deadline, interrupt). A warm-up that meets a
// demand read's fetch of the same block joins it. Only over an origin whose
// requests end on their own (S3, HTTP): over one that may hang (POSIX) the
// warm-up keeps waiting on another thread, as before.
TEST_F(EngineTest, AWarmUpFetchesOnItsOwnThreadADemandReadOnAFetchThread) {
  ufs_->set_bounds_request_time(true);
  Put("warm", RandomBytes(10 << 10, 1));
  Put("demand", RandomBytes(10 << 10, 2));
  Put("shared", RandomBytes(10 << 10, 3));
  Put("opened", RandomBytes(10 << 10, 4));
  Open();
  FetchThreads fetched_on;
  fetched_on.Install(*ufs_);
  ExpectFetched("warm", Priority::kLow);
  EXPECT_TRUE(engine_->IsCached(Ino("warm")));
  std::string buf(10 << 10, '\0');
  auto r = engine_->Read(Ino("demand"), 0, std::span<char>(buf));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // A whole-file fetch a reader waits for (the API's open of a cold file,
  // high priority) keeps the hand-off: its wait ends at origin_timeout.
  ExpectFetched("opened", Priority::kHigh);
  ASSERT_EQ(fetched_on.keys(), 3u);
  EXPECT_EQ(fetched_on.Of("ds/warm"), std::this_thread::get_id());
  EXPECT_NE(fetched_on.Of("ds/demand"), std::this_thread::get_id());
  EXPECT_NE(fetched_on.Of("ds/opened"), std::this_thread::get_id());
  // A warm-up joining a demand read's stalled fetch waits for it and makes
  // no second request.
  StallGate gate;
  gate.Install(*ufs_, "shared");
  Result<size_t> demand = size_t{0};
  std::string buf2(10 << 10, '\0');
  std::thread reader([&] { demand = engine_->Read(Ino("shared"), 0, std::span<char>(buf2)); });
  gate.AwaitBlocked(1);
  Result<bool> joined = false;
  std::thread warmer([&] { joined = engine_->Fetch(snapshot_, Ino("shared"), Priority::kLow); });
  Eventually([&] { return engine_->stats().flight_joins == 1; });
  gate.Release();
  reader.join();
  warmer.join();
  ASSERT_TRUE(demand.ok()) << demand.status().ToString();
  EXPECT_EQ(buf2, objects_["shared"]);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_TRUE(*joined);
  EXPECT_TRUE(engine_->IsCached(Ino("shared")));
  EXPECT_EQ(ufs_->stats().read_requests, 4u);
}

TEST_F(EngineTest, OverAnOriginThatMayHangAWarmUpStillWaitsOnAnotherThread) {
  Put("warm", RandomBytes(10 << 10, 1));
  Open();
  FetchThreads fetched_on;
  fetched_on.Install(*ufs_);
  ExpectFetched("warm", Priority::kLow);
  EXPECT_NE(fetched_on.Of("ds/warm"), std::this_thread::get_id());
}

// Shutdown ends the waits of readers stuck on a stalled origin.
TEST_F(EngineTest, ShutdownReleasesWaitingReaders) {
  Put("stuck", RandomBytes(10 << 10, 1));
  Open();
  StallGate gate;
  gate.Install(*ufs_, "stuck");
  Result<size_t> r = size_t{0};
  std::string buf(10 << 10, '\0');
  std::thread t([&] { r = engine_->Read(Ino("stuck"), 0, std::span<char>(buf)); });
  gate.AwaitBlocked(1);
  std::thread stopper([&] { engine_->Shutdown(); });  // waits for the stuck fetch
  t.join();
  EXPECT_EQ(r.status().code(), Code::kCancelled);
  gate.Release();
  stopper.join();
}

}  // namespace
}  // namespace granary
