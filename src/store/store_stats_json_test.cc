// The store's counters and tiers survive the stats file: every field written
// is read back, old files (fewer fields) still read, bad ones name the field.
#include "store/store_stats_json.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

// Every field set, each to a different value; two tiers.
StoreStats Sample() {
  StoreStats s{.read_hits = 1,
               .read_misses = 2,
               .hit_bytes = 3,
               .miss_bytes = 4,
               .admissions = 5,
               .refusals = 6,
               .no_space = 7,
               .evictions = 8,
               .demotions = 9,
               .checksum_failures = 10,
               .recovered_objects = 11,
               .recovery_dropped = 12,
               .orphans_removed = 13,
               .near_refused = 14,
               .near_evictions = 15,
               .complete_objects = 16,
               .complete_bytes = 17,
               .owned_complete_objects = 18,
               .owned_complete_bytes = 19,
               .owned_block_bytes = 20};
  s.tiers.push_back(TierStats{.medium = Medium::kMem,
                              .path = "/dev/shm/granary-abc",
                              .quota = 1 << 30,
                              .used_bytes = 4096,
                              .files = 1});
  s.tiers.push_back(TierStats{.medium = Medium::kHdd,
                              .path = "/data/cache/abc",
                              .quota = uint64_t{1} << 63,
                              .used_bytes = 8192,
                              .files = 2});
  return s;
}

void ExpectSame(const StoreStats& a, const StoreStats& b) {
  ASSERT_EQ(a.tiers.size(), b.tiers.size());
  for (size_t i = 0; i < a.tiers.size(); ++i) {
    EXPECT_EQ(a.tiers[i].medium, b.tiers[i].medium) << i;
    EXPECT_EQ(a.tiers[i].path, b.tiers[i].path) << i;
    EXPECT_EQ(a.tiers[i].quota, b.tiers[i].quota) << i;
    EXPECT_EQ(a.tiers[i].used_bytes, b.tiers[i].used_bytes) << i;
    EXPECT_EQ(a.tiers[i].files, b.tiers[i].files) << i;
  }
  EXPECT_EQ(a.read_hits, b.read_hits);
  EXPECT_EQ(a.read_misses, b.read_misses);
  EXPECT_EQ(a.hit_bytes, b.hit_bytes);
  EXPECT_EQ(a.miss_bytes, b.miss_bytes);
  EXPECT_EQ(a.admissions, b.admissions);
  EXPECT_EQ(a.refusals, b.refusals);
  EXPECT_EQ(a.no_space, b.no_space);
  EXPECT_EQ(a.evictions, b.evictions);
  EXPECT_EQ(a.demotions, b.demotions);
  EXPECT_EQ(a.checksum_failures, b.checksum_failures);
  EXPECT_EQ(a.recovered_objects, b.recovered_objects);
  EXPECT_EQ(a.recovery_dropped, b.recovery_dropped);
  EXPECT_EQ(a.orphans_removed, b.orphans_removed);
  EXPECT_EQ(a.near_refused, b.near_refused);
  EXPECT_EQ(a.near_evictions, b.near_evictions);
  EXPECT_EQ(a.complete_objects, b.complete_objects);
  EXPECT_EQ(a.complete_bytes, b.complete_bytes);
  EXPECT_EQ(a.owned_complete_objects, b.owned_complete_objects);
  EXPECT_EQ(a.owned_complete_bytes, b.owned_complete_bytes);
  EXPECT_EQ(a.owned_block_bytes, b.owned_block_bytes);
}

TEST(StoreStatsJson, EveryFieldSurvivesTheTextRoundTrip) {
  const StoreStats s = Sample();
  auto back = StoreStatsFromJson(nlohmann::json::parse(ToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(s, *back);
}

TEST(StoreStatsJson, KeepsTheStatsFileNames) {
  const nlohmann::json j = ToJson(Sample());
  EXPECT_EQ(j["tiers"][0]["medium"], "MEM");
  EXPECT_EQ(j["tiers"][1]["used_bytes"], 8192);
  EXPECT_EQ(j["read_hits"], 1);
  EXPECT_EQ(j["read_misses"], 2);
  EXPECT_EQ(j["evictions"], 8);
  EXPECT_EQ(j["checksum_failures"], 10);
  EXPECT_EQ(j["recovered_objects"], 11);
}

TEST(StoreStatsJson, AnOlderFileWithoutNewCountersReadsAsZeros) {
  auto back = StoreStatsFromJson(nlohmann::json::parse(
      R"({"tiers": [{"medium": "SSD", "path": "/c", "quota": 10, "used_bytes": 4, "files": 1}],
          "read_hits": 3, "evictions": 2})"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->tiers.size(), 1u);
  EXPECT_EQ(back->tiers[0].medium, Medium::kSsd);
  EXPECT_EQ(back->read_hits, 3u);
  EXPECT_EQ(back->near_evictions, 0u);
}

TEST(StoreStatsJson, ABadFieldIsAnErrorNamingIt) {
  auto medium = StoreStatsFromJson(nlohmann::json::parse(R"({"tiers": [{"medium": "TAPE"}]})"));
  ASSERT_FALSE(medium.ok());
  EXPECT_NE(medium.status().message().find("TAPE"), std::string::npos);
  auto quota = StoreStatsFromJson(nlohmann::json::parse(R"({"tiers": [{"quota": -5}]})"));
  ASSERT_FALSE(quota.ok());
  EXPECT_NE(quota.status().message().find("'quota'"), std::string::npos);
  EXPECT_FALSE(StoreStatsFromJson(nlohmann::json::parse(R"({"tiers": 3})")).ok());
  EXPECT_FALSE(StoreStatsFromJson(nlohmann::json::parse(R"({"evictions": true})")).ok());
}

}  // namespace
}  // namespace granary
