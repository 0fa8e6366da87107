// The store's complete-object counters (StoreStats::complete_* and
// owned_complete_*): what `granary status` reports as CACHED without a scan of
// every file. Each test compares them with what the index itself says
// (Describe over every key the test used) after admissions, sparse
// completion, removal, eviction, demotion, checksum-failure drops, recovery at
// Open and ownership changes; a property test does so after every step of
// random sequences.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store/store.h"
#include "store/store_test_util.h"

namespace granary {
namespace {

using testing_util::MakeData;
using testing_util::TempDir;

constexpr uint64_t kBlock = 64 * 1024;

StoreOptions Options(const std::string& dir, uint64_t quota = 64ull << 20) {
  return StoreOptions{.tiers = {TierLevel{.medium = Medium::kSsd,
                                          .path = dir + "/ssd",
                                          .quota = quota,
                                          .high = 0.9,
                                          .low = 0.5}},
                      .block_size = kBlock,
                      .background = false,
                      .index_shards = 4};
}

ObjectKey Key(int i, uint64_t size) {
  return ObjectKey{.dataset = "ds", .key = "obj/" + std::to_string(i), .etag = "v1", .size = size};
}

struct Counts {
  uint64_t objects = 0, bytes = 0, owned_objects = 0, owned_bytes = 0;
  bool operator==(const Counts&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << "{objects " << c.objects << ", bytes " << c.bytes << ", owned " << c.owned_objects
            << ", owned bytes " << c.owned_bytes << "}";
}

Counts FromStats(const Store& store) {
  StoreStats s = store.stats();
  return Counts{.objects = s.complete_objects,
                .bytes = s.complete_bytes,
                .owned_objects = s.owned_complete_objects,
                .owned_bytes = s.owned_complete_bytes};
}

// The reference: the complete objects among `keys` per Describe, the owned
// ones per `owns` (null: all).
Counts Reference(const Store& store, const std::vector<ObjectKey>& keys,
                 const std::function<bool(const ObjectKey&)>& owns = {}) {
  Counts c;
  for (const ObjectKey& k : keys) {
    auto info = store.Describe(k);
    if (!info.ok() || !info->complete) continue;
    EXPECT_TRUE(store.Contains(k)) << k.key;
    ++c.objects;
    c.bytes += k.size;
    if (!owns || owns(k)) {
      ++c.owned_objects;
      c.owned_bytes += k.size;
    }
  }
  return c;
}

TEST(StoreCountersTest, WholeAdmissionsCountOnce) {
  TempDir dir;
  auto store = Store::Open(Options(dir.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<ObjectKey> keys = {Key(1, 1000), Key(2, kBlock), Key(3, 3 * kBlock + 7), Key(4, 0)};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE((*store)->AdmitObject(keys[i], MakeData(keys[i].size, i)).value());
  }
  // Admitting again (whole, or a block already present) changes nothing.
  ASSERT_TRUE((*store)->AdmitObject(keys[0], MakeData(keys[0].size, 0)).value());
  ASSERT_TRUE((*store)->AdmitBlock(keys[2], 1, MakeData(keys[2].size, 2).substr(kBlock, kBlock))
                  .value());
  const uint64_t bytes = 1000 + kBlock + 3 * kBlock + 7;
  EXPECT_EQ(FromStats(**store), (Counts{4, bytes, 4, bytes}));
  EXPECT_EQ(FromStats(**store), Reference(**store, keys));
}

TEST(StoreCountersTest, ASparseObjectCountsWhenItsLastBlockArrives) {
  TempDir dir;
  auto store = Store::Open(Options(dir.path()));
  ASSERT_TRUE(store.ok());
  const ObjectKey k = Key(1, 3 * kBlock + 100);  // 4 blocks
  const std::string data = MakeData(k.size, 1);
  for (uint64_t b : {3, 0, 2}) {
    ASSERT_TRUE((*store)->AdmitBlock(k, b, std::string_view(data).substr(b * kBlock, kBlock))
                    .value());
    EXPECT_EQ(FromStats(**store), Counts{}) << "after block " << b;
  }
  ASSERT_TRUE((*store)->AdmitBlock(k, 1, std::string_view(data).substr(kBlock, kBlock)).value());
  EXPECT_EQ(FromStats(**store), (Counts{1, k.size, 1, k.size}));
  // A block admitted twice is not a second completion.
  ASSERT_TRUE((*store)->AdmitBlock(k, 1, std::string_view(data).substr(kBlock, kBlock)).value());
  EXPECT_EQ(FromStats(**store), (Counts{1, k.size, 1, k.size}));
}

TEST(StoreCountersTest, RemoveTakesOutWhatWasCounted) {
  TempDir dir;
  auto store = Store::Open(Options(dir.path()));
  ASSERT_TRUE(store.ok());
  const ObjectKey whole = Key(1, 5000), sparse = Key(2, 2 * kBlock + 1);
  ASSERT_TRUE((*store)->AdmitObject(whole, MakeData(whole.size, 1)).value());
  ASSERT_TRUE((*store)->AdmitBlock(sparse, 0, MakeData(kBlock, 2)).value());  // partial
  EXPECT_EQ(FromStats(**store), (Counts{1, 5000, 1, 5000}));
  ASSERT_TRUE((*store)->Remove(sparse).ok());  // partial: was never counted
  EXPECT_EQ(FromStats(**store), (Counts{1, 5000, 1, 5000}));
  ASSERT_TRUE((*store)->Remove(Key(9, 10)).ok());  // not cached
  ASSERT_TRUE((*store)->Remove(whole).ok());
  EXPECT_EQ(FromStats(**store), Counts{});
}

TEST(StoreCountersTest, EvictionAndDemotionUnderQuotaPressure) {
  TempDir dir;
  StoreOptions opt = Options(dir.path());
  opt.tiers = {TierLevel{.medium = Medium::kMem, .path = dir.path() + "/mem",
                         .quota = 400 * 1024, .high = 0.8, .low = 0.5},
               TierLevel{.medium = Medium::kSsd, .path = dir.path() + "/ssd",
                         .quota = 600 * 1024, .high = 0.8, .low = 0.5}};
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  std::vector<ObjectKey> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(Key(i, 20'000 + 1000 * i));
    auto r = (*store)->AdmitObject(keys.back(), MakeData(keys.back().size, i));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (i % 5 == 4) (*store)->RunEvictionOnce();
    ASSERT_EQ(FromStats(**store), Reference(**store, keys)) << "after object " << i;
  }
  StoreStats s = (*store)->stats();
  EXPECT_GT(s.demotions, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.complete_objects, 0u);
  EXPECT_LT(s.complete_objects, keys.size());
}

TEST(StoreCountersTest, ReopenCountsWhatSurvivedRecovery) {
  TempDir dir;
  const StoreOptions opt = Options(dir.path());
  std::vector<ObjectKey> keys = {Key(1, 1000), Key(2, 2000), Key(3, 2 * kBlock + 5),
                                 Key(4, 3 * kBlock)};
  std::string lost_path;
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE((*store)->AdmitObject(keys[i], MakeData(keys[i].size, i)).value());
    }
    ASSERT_TRUE((*store)->AdmitBlock(keys[3], 0, MakeData(kBlock, 3)).value());  // partial
    lost_path = (*store)->Describe(keys[1])->path;
  }
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(FromStats(**store), (Counts{3, 3000 + keys[2].size, 3, 3000 + keys[2].size}));
    EXPECT_EQ(FromStats(**store), Reference(**store, keys));
  }
  ASSERT_EQ(::unlink(lost_path.c_str()), 0);  // recovery drops the entry
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().recovery_dropped, 1u);
  EXPECT_EQ(FromStats(**store), (Counts{2, 1000 + keys[2].size, 2, 1000 + keys[2].size}));
  EXPECT_EQ(FromStats(**store), Reference(**store, keys));
}

TEST(StoreCountersTest, AChecksumFailureDropUncounts) {
  TempDir dir;
  const StoreOptions opt = Options(dir.path());
  const ObjectKey k = Key(1, 10'000);
  std::string path;
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->AdmitObject(k, MakeData(k.size, 1)).value());
    path = (*store)->Describe(k)->path;
  }
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "XYZ", 3, 100), 3);
  ::close(fd);
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(FromStats(**store), (Counts{1, k.size, 1, k.size}));  // not verified yet
  std::string buf(100, '\0');
  EXPECT_EQ((*store)->Read(k, 0, std::span(buf)).status().code(), Code::kNotFound);
  EXPECT_EQ((*store)->stats().checksum_failures, 1u);
  EXPECT_EQ(FromStats(**store), Counts{});
}

TEST(StoreCountersTest, OwnershipFollowsTheOracleAfterARecount) {
  TempDir dir;
  auto store = Store::Open(Options(dir.path()));
  ASSERT_TRUE(store.ok());
  std::vector<ObjectKey> keys;
  for (int i = 0; i < 10; ++i) keys.push_back(Key(i, 1000 * (i + 1)));
  auto owns_even = [](const ObjectKey& k) { return std::stoi(k.key.substr(4)) % 2 == 0; };
  auto owns_low = [](const ObjectKey& k) { return std::stoi(k.key.substr(4)) < 3; };
  (*store)->SetOwnershipOracle(owns_even);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*store)->AdmitObject(keys[i], MakeData(keys[i].size, i)).value());
  }
  EXPECT_EQ(FromStats(**store), Reference(**store, keys, owns_even));
  EXPECT_EQ((*store)->stats().owned_complete_objects, 5u);

  // An oracle whose answers change (membership) is asked again by a recount.
  bool low = false;
  (*store)->SetOwnershipOracle(
      [&low, owns_even, owns_low](const ObjectKey& k) { return low ? owns_low(k) : owns_even(k); });
  low = true;
  EXPECT_EQ(FromStats(**store), Reference(**store, keys, owns_even));  // as counted
  (*store)->RecountOwnership();
  EXPECT_EQ(FromStats(**store), Reference(**store, keys, owns_low));
  EXPECT_EQ((*store)->stats().owned_complete_bytes, 1000u + 2000 + 3000);

  // Removal subtracts what was counted for the entry: owned 1, not owned 5.
  ASSERT_TRUE((*store)->Remove(keys[1]).ok());
  ASSERT_TRUE((*store)->Remove(keys[5]).ok());
  EXPECT_EQ(FromStats(**store), Reference(**store, keys, owns_low));
  EXPECT_EQ((*store)->stats().owned_complete_objects, 2u);

  (*store)->SetOwnershipOracle(nullptr);  // everything owned again
  EXPECT_EQ(FromStats(**store), Reference(**store, keys));
  EXPECT_EQ((*store)->stats().owned_complete_objects, 8u);
}

// Random admissions (whole and by block), removals, eviction passes,
// ownership changes, checkpoints and reopens; after every step the counters
// equal the sum over the index (Describe), owned per the current oracle.
void RunCountersSequence(uint64_t seed, uint64_t& evictions, uint64_t& reopens) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  StoreOptions opt = Options(dir.path(), 1200 * 1024);
  opt.tiers[0].high = 0.8;
  std::vector<ObjectKey> keys;
  std::vector<std::string> data;
  for (int i = 0; i < 30; ++i) {
    uint64_t size = i % 3 == 0 ? rng() % (4 * kBlock) : rng() % (kBlock + 1);
    keys.push_back(Key(i, size));
    data.push_back(MakeData(size, seed * 100 + i));
  }
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  std::unique_ptr<Store> s = std::move(*store);
  uint64_t mask = rng();  // bit i: this node owns object i
  auto oracle = [&mask](const ObjectKey& k) { return (mask >> std::stoi(k.key.substr(4))) & 1; };
  s->SetOwnershipOracle(oracle);
  for (int step = 0; step < 300; ++step) {
    const int i = static_cast<int>(rng() % keys.size());
    const uint64_t blocks = keys[i].size <= kBlock ? 1 : (keys[i].size + kBlock - 1) / kBlock;
    const int op = static_cast<int>(rng() % 100);
    if (op < 30) {
      ASSERT_TRUE(s->AdmitObject(keys[i], data[i]).ok());
    } else if (op < 65) {
      const uint64_t b = rng() % blocks;
      ASSERT_TRUE(s->AdmitBlock(keys[i], b, std::string_view(data[i]).substr(b * kBlock, kBlock))
                      .ok());
    } else if (op < 75) {
      ASSERT_TRUE(s->Remove(keys[i]).ok());
    } else if (op < 85) {
      s->RunEvictionOnce();
    } else if (op < 93) {
      mask = rng();
      s->RecountOwnership();
    } else if (op < 96) {
      ASSERT_TRUE(s->Checkpoint().ok());
    } else {
      s.reset();
      auto reopened = Store::Open(opt);
      ASSERT_TRUE(reopened.ok());
      s = std::move(*reopened);
      ASSERT_EQ(FromStats(*s), Reference(*s, keys)) << "reopened: everything owned";
      s->SetOwnershipOracle(oracle);
      ++reopens;
    }
    ASSERT_EQ(FromStats(*s), Reference(*s, keys, oracle)) << "after step " << step << " op " << op;
  }
  evictions += s->stats().evictions;
}

TEST(StoreCountersTest, MatchTheIndexAfterRandomOperations) {
  uint64_t evictions = 0, reopens = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    ASSERT_NO_FATAL_FAILURE(RunCountersSequence(seed, evictions, reopens));
  }
  EXPECT_GT(evictions, 0u);  // the interesting paths ran
  EXPECT_GT(reopens, 0u);
}

}  // namespace
}  // namespace granary
