// The store's complete-object counters (StoreStats::complete_* and
// owned_complete_*) and its block-level owned bytes (owned_block_bytes): what
// `granary status` reports as CACHED without a scan of every file, and what a
// cluster sums over its members. Each test compares them with what the index
// itself says (Describe and ContainsRange over every key the test used) after
// admissions, sparse completion, removal, eviction, demotion,
// checksum-failure drops, recovery at Open and ownership changes; a property
// test does so after every step of random sequences.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store/store.h"
#include "testing/store_test_util.h"

namespace granary {
namespace {

using testing_util::Key;
using testing_util::MakeData;
using testing_util::TempDir;

constexpr uint64_t kBlock = 64 * 1024;

StoreOptions Options(const std::string& dir, uint64_t quota = 64ull << 20) {
  return StoreOptions{
      .tiers = {TierLevel{
          .medium = Medium::kSsd, .path = dir + "/ssd", .quota = quota, .high = 0.9, .low = 0.5}},
      .block_size = kBlock,
      .background = false,
      .index_shards = 4};
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

using BlockOracle = std::function<bool(const ObjectKey&, uint64_t)>;

uint64_t BlockLength(const ObjectKey& k, uint64_t b) {
  return b * kBlock >= k.size ? 0 : std::min<uint64_t>(kBlock, k.size - b * kBlock);
}

// The reference for owned_block_bytes: the present blocks among `keys` per
// ContainsRange, owned per `owns` (null: all).
uint64_t ReferenceBlockBytes(const Store& store, const std::vector<ObjectKey>& keys,
                             const BlockOracle& owns = {}) {
  uint64_t bytes = 0;
  for (const ObjectKey& k : keys) {
    const uint64_t blocks = k.size <= kBlock ? 1 : (k.size + kBlock - 1) / kBlock;
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t len = BlockLength(k, b);
      if (len == 0 || !store.ContainsRange(k, b * kBlock, len)) continue;
      if (!owns || owns(k, b)) bytes += len;
    }
  }
  return bytes;
}

int Index(const ObjectKey& k) { return std::stoi(k.key.substr(4)); }

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
  ASSERT_TRUE(
      (*store)->AdmitBlock(keys[2], 1, MakeData(keys[2].size, 2).substr(kBlock, kBlock)).value());
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
    ASSERT_TRUE(
        (*store)->AdmitBlock(k, b, std::string_view(data).substr(b * kBlock, kBlock)).value());
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
  opt.tiers = {TierLevel{.medium = Medium::kMem,
                         .path = dir.path() + "/mem",
                         .quota = 400 * 1024,
                         .high = 0.8,
                         .low = 0.5},
               TierLevel{.medium = Medium::kSsd,
                         .path = dir.path() + "/ssd",
                         .quota = 600 * 1024,
                         .high = 0.8,
                         .low = 0.5}};
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

TEST(StoreCountersTest, BlockBytesCountThePrimaryOwnersBlocksOnly) {
  TempDir dir;
  auto store = Store::Open(Options(dir.path()));
  ASSERT_TRUE(store.ok());
  // Object i's block b is this node's when i + b is even: alternate blocks.
  BlockOracle alternate = [](const ObjectKey& k, uint64_t b) { return (Index(k) + b) % 2 == 0; };
  (*store)->SetOwnershipOracle(nullptr, alternate);
  const ObjectKey sparse = Key(0, 4 * kBlock + 100);  // 5 blocks, owned: 0, 2, 4
  const ObjectKey mine = Key(2, 3000), theirs = Key(3, 5000), whole = Key(4, 2 * kBlock + 9);
  const std::vector<ObjectKey> keys = {sparse, mine, theirs, whole};
  const std::string data = MakeData(sparse.size, 1);
  uint64_t want = 0;
  for (uint64_t b : {1, 4, 0, 3}) {
    ASSERT_TRUE(
        (*store)->AdmitBlock(sparse, b, std::string_view(data).substr(b * kBlock, kBlock)).value());
    if (b % 2 == 0) want += BlockLength(sparse, b);
    EXPECT_EQ((*store)->stats().owned_block_bytes, want) << "after block " << b;
  }
  EXPECT_EQ(want, kBlock + 100);
  // Again: nothing more.
  ASSERT_TRUE((*store)->AdmitBlock(sparse, 0, std::string_view(data).substr(0, kBlock)).value());
  EXPECT_EQ((*store)->stats().owned_block_bytes, want);
  // Small objects: block 0 is the whole object, whole admission or block 0.
  ASSERT_TRUE((*store)->AdmitObject(mine, MakeData(mine.size, 2)).value());
  ASSERT_TRUE((*store)->AdmitBlock(theirs, 0, MakeData(theirs.size, 3)).value());
  want += mine.size;
  EXPECT_EQ((*store)->stats().owned_block_bytes, want);
  // A large object admitted whole counts its owned blocks: 0 and 2.
  ASSERT_TRUE((*store)->AdmitObject(whole, MakeData(whole.size, 4)).value());
  want += kBlock + 9;
  StoreStats s = (*store)->stats();
  EXPECT_EQ(s.owned_block_bytes, want);
  EXPECT_EQ(s.owned_block_bytes, ReferenceBlockBytes(**store, keys, alternate));
  // The object-level counters ignore the block oracle.
  EXPECT_EQ(s.owned_complete_objects, 3u);

  // Drops subtract exactly what the entry contributed: partial, then whole.
  ASSERT_TRUE((*store)->Remove(sparse).ok());
  want -= kBlock + 100;
  EXPECT_EQ((*store)->stats().owned_block_bytes, want);
  ASSERT_TRUE((*store)->Remove(theirs).ok());  // contributed nothing
  EXPECT_EQ((*store)->stats().owned_block_bytes, want);
  ASSERT_TRUE((*store)->Remove(whole).ok());
  EXPECT_EQ((*store)->stats().owned_block_bytes, mine.size);
  ASSERT_TRUE((*store)->Remove(mine).ok());
  EXPECT_EQ((*store)->stats().owned_block_bytes, 0u);
}

TEST(StoreCountersTest, BlockBytesFollowTheOracleAfterARecount) {
  TempDir dir;
  auto store = Store::Open(Options(dir.path()));
  ASSERT_TRUE(store.ok());
  std::vector<ObjectKey> keys = {Key(0, 5 * kBlock), Key(1, 3 * kBlock + 1), Key(2, 700),
                                 Key(3, 2 * kBlock)};
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string data = MakeData(keys[i].size, i);
    // Object 1 stays partial: blocks 0 and 3 only.
    for (uint64_t b = 0; b * kBlock < keys[i].size; ++b) {
      if (i == 1 && (b == 1 || b == 2)) continue;
      ASSERT_TRUE((*store)
                      ->AdmitBlock(keys[i], b, std::string_view(data).substr(b * kBlock, kBlock))
                      .value());
    }
  }
  // No oracle: every present block is owned.
  const uint64_t present = 5 * kBlock + kBlock + 1 + 700 + 2 * kBlock;
  EXPECT_EQ((*store)->stats().owned_block_bytes, present);
  EXPECT_EQ(ReferenceBlockBytes(**store, keys), present);

  BlockOracle even = [](const ObjectKey&, uint64_t b) { return b % 2 == 0; };
  BlockOracle odd = [](const ObjectKey&, uint64_t b) { return b % 2 == 1; };
  bool flipped = false;
  (*store)->SetOwnershipOracle(
      nullptr, [&](const ObjectKey& k, uint64_t b) { return flipped ? odd(k, b) : even(k, b); });
  const uint64_t even_bytes = ReferenceBlockBytes(**store, keys, even);
  EXPECT_EQ((*store)->stats().owned_block_bytes, even_bytes);
  flipped = true;  // membership changed: counted as before until a recount
  EXPECT_EQ((*store)->stats().owned_block_bytes, even_bytes);
  (*store)->RecountOwnership();
  EXPECT_EQ((*store)->stats().owned_block_bytes, ReferenceBlockBytes(**store, keys, odd));
  // Together the two "nodes" count every present byte once.
  EXPECT_EQ(even_bytes + (*store)->stats().owned_block_bytes, present);

  // A block arriving after the recount counts per the current answers;
  // the partial object's drop takes out what it contributed by then.
  const std::string data1 = MakeData(keys[1].size, 1);
  ASSERT_TRUE(
      (*store)->AdmitBlock(keys[1], 1, std::string_view(data1).substr(kBlock, kBlock)).value());
  EXPECT_EQ((*store)->stats().owned_block_bytes, ReferenceBlockBytes(**store, keys, odd));
  ASSERT_TRUE((*store)->Remove(keys[1]).ok());
  EXPECT_EQ((*store)->stats().owned_block_bytes, ReferenceBlockBytes(**store, keys, odd));

  (*store)->SetOwnershipOracle(nullptr);  // every block owned again
  EXPECT_EQ((*store)->stats().owned_block_bytes, ReferenceBlockBytes(**store, keys));
}

TEST(StoreCountersTest, BlockBytesAfterReopenCountWhatSurvived) {
  TempDir dir;
  const StoreOptions opt = Options(dir.path());
  std::vector<ObjectKey> keys = {Key(0, 1000), Key(1, 3 * kBlock + 5), Key(2, 4 * kBlock),
                                 Key(3, 2000)};
  BlockOracle alternate = [](const ObjectKey& k, uint64_t b) { return (Index(k) + b) % 2 == 0; };
  std::string lost_path;
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    (*store)->SetOwnershipOracle(nullptr, alternate);
    for (int i : {0, 1, 3}) {
      ASSERT_TRUE((*store)->AdmitObject(keys[i], MakeData(keys[i].size, i)).value());
    }
    const std::string data = MakeData(keys[2].size, 2);
    for (uint64_t b : {0, 1, 3}) {  // partial
      ASSERT_TRUE((*store)
                      ->AdmitBlock(keys[2], b, std::string_view(data).substr(b * kBlock, kBlock))
                      .value());
    }
    EXPECT_EQ((*store)->stats().owned_block_bytes, ReferenceBlockBytes(**store, keys, alternate));
    lost_path = (*store)->Describe(keys[3])->path;
  }
  ASSERT_EQ(::unlink(lost_path.c_str()), 0);  // recovery drops the entry
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().recovery_dropped, 1u);
  // No oracle yet after Open: every surviving block is owned.
  EXPECT_EQ((*store)->stats().owned_block_bytes, 1000 + keys[1].size + 3 * kBlock);
  EXPECT_EQ((*store)->stats().owned_block_bytes, ReferenceBlockBytes(**store, keys));
  (*store)->SetOwnershipOracle(nullptr, alternate);
  EXPECT_EQ((*store)->stats().owned_block_bytes, ReferenceBlockBytes(**store, keys, alternate));
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
  uint64_t block_mask = rng();  // bit (2i + b) % 64: this node is block b's primary owner
  BlockOracle block_oracle = [&block_mask](const ObjectKey& k, uint64_t b) {
    return (block_mask >> ((2 * Index(k) + b) % 64)) & 1;
  };
  s->SetOwnershipOracle(oracle, block_oracle);
  for (int step = 0; step < 300; ++step) {
    const int i = static_cast<int>(rng() % keys.size());
    const uint64_t blocks = keys[i].size <= kBlock ? 1 : (keys[i].size + kBlock - 1) / kBlock;
    const int op = static_cast<int>(rng() % 100);
    if (op < 30) {
      ASSERT_TRUE(s->AdmitObject(keys[i], data[i]).ok());
    } else if (op < 65) {
      const uint64_t b = rng() % blocks;
      ASSERT_TRUE(
          s->AdmitBlock(keys[i], b, std::string_view(data[i]).substr(b * kBlock, kBlock)).ok());
    } else if (op < 75) {
      ASSERT_TRUE(s->Remove(keys[i]).ok());
    } else if (op < 85) {
      s->RunEvictionOnce();
    } else if (op < 93) {
      mask = rng();
      block_mask = rng();
      s->RecountOwnership();
    } else if (op < 96) {
      ASSERT_TRUE(s->Checkpoint().ok());
    } else {
      s.reset();
      auto reopened = Store::Open(opt);
      ASSERT_TRUE(reopened.ok());
      s = std::move(*reopened);
      ASSERT_EQ(FromStats(*s), Reference(*s, keys)) << "reopened: everything owned";
      ASSERT_EQ(s->stats().owned_block_bytes, ReferenceBlockBytes(*s, keys));
      s->SetOwnershipOracle(oracle, block_oracle);
      ++reopens;
    }
    ASSERT_EQ(FromStats(*s), Reference(*s, keys, oracle)) << "after step " << step << " op " << op;
    ASSERT_EQ(s->stats().owned_block_bytes, ReferenceBlockBytes(*s, keys, block_oracle))
        << "after step " << step << " op " << op;
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
