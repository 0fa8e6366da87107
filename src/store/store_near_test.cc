// Cluster near copies in the store: a kNear block is admitted only into free
// space (never past capacity = high × quota), and eviction takes objects the
// node does not own before any object it owns.
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "store/store.h"
#include "testing/store_test_util.h"

namespace granary {
namespace {

using testing_util::MakeData;
using testing_util::TempDir;

constexpr uint64_t kSize = 100 * 1024;  // 25 allocation units

StoreOptions Tier(const std::string& path, uint64_t quota) {
  return StoreOptions{
      .tiers = {TierLevel{
          .medium = Medium::kSsd, .path = path, .quota = quota, .high = 0.9, .low = 0.5}},
      .block_size = 1 << 20,
      .background = false};
}

ObjectKey Key(int i) {
  return ObjectKey{.dataset = "ds", .key = "obj/" + std::to_string(i), .etag = "v1", .size = kSize};
}

TEST(StoreNearTest, NearCopiesUseOnlyFreeSpace) {
  TempDir dir;
  auto opened = Store::Open(Tier(dir.path(), 1 << 20));  // capacity 0.9 MiB: 9 objects
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  int admitted = 0;
  for (int i = 0; i < 12; ++i) {
    auto r = store.AdmitBlock(Key(i), 0, MakeData(kSize, i), false, AdmitKind::kNear);
    ASSERT_TRUE(r.ok());
    admitted += *r;
  }
  EXPECT_EQ(admitted, 9);
  EXPECT_EQ(store.stats().near_refused, 3u);
  EXPECT_EQ(store.stats().evictions, 0u);
  // Owned data still gets the room up to the quota (and eviction makes more).
  auto owned = store.AdmitBlock(Key(100), 0, MakeData(kSize, 100));
  ASSERT_TRUE(owned.ok());
  EXPECT_TRUE(*owned);
}

TEST(StoreNearTest, EvictionTakesNearCopiesFirst) {
  TempDir dir;
  auto opened = Store::Open(Tier(dir.path(), 1 << 20));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  // Even keys are owned here, odd ones are near copies. Owned ones are the
  // least recently used, so plain LRU would evict them first.
  std::set<std::string> owned_keys;
  for (int i = 0; i < 10; i += 2) owned_keys.insert(Key(i).key);
  store.SetOwnershipOracle(
      [&owned_keys](const ObjectKey& k) { return owned_keys.count(k.key) > 0; });
  for (int i = 0; i < 10; i += 2)
    ASSERT_TRUE(store.AdmitObject(Key(i), MakeData(kSize, i)).value());
  for (int i = 1; i < 10; i += 2) {
    ASSERT_TRUE(store.AdmitBlock(Key(i), 0, MakeData(kSize, i), false, AdmitKind::kOwned).value());
  }
  store.RunEvictionOnce();  // 10 objects > 0.9 MiB: down to 0.5 MiB (5 objects)
  for (int i = 0; i < 10; i += 2) EXPECT_TRUE(store.Contains(Key(i))) << "owned " << i;
  for (int i = 1; i < 10; i += 2) EXPECT_FALSE(store.Contains(Key(i))) << "near " << i;
  EXPECT_EQ(store.stats().near_evictions, 5u);

  // Without an oracle every object counts as owned: plain LRU again.
  store.SetOwnershipOracle(nullptr);
  for (int i = 1; i < 10; i += 2)
    ASSERT_TRUE(store.AdmitObject(Key(i), MakeData(kSize, i)).value());
  store.RunEvictionOnce();
  for (int i = 0; i < 10; i += 2) EXPECT_FALSE(store.Contains(Key(i))) << "LRU " << i;
  EXPECT_EQ(store.stats().near_evictions, 5u);
}

}  // namespace
}  // namespace granary
