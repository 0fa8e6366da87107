// The engine's counters survive the stats file: every field written is read
// back, old files (fewer fields) still read, bad ones name the field.
#include "cache/engine_stats_json.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

// Every field set, each to a different value.
EngineStats Sample() {
  EngineStats s{.ufs_files = 1,
                .ufs_bytes = uint64_t{1} << 63,  // beyond int64
                .reads = 3,
                .hit_reads = 4,
                .miss_reads = 5,
                .hit_bytes = 6,
                .miss_bytes = 7,
                .read_errors = 8,
                .origin_requests = 9,
                .origin_bytes = 10,
                .origin_errors = 11,
                .flight_joins = 12,
                .admitted = 13,
                .not_admitted = 14,
                .admit_errors = 15,
                .near_admitted = 16,
                .peer_blocks = 17,
                .peer_bytes = 18,
                .peer_fallbacks = 19,
                .served_blocks = 20,
                .served_hits = 23,
                .served_bytes = 21,
                .served_errors = 22};
  for (size_t i = 0; i < s.origin_latency_buckets.size(); ++i)
    s.origin_latency_buckets[i] = 100 + i;
  for (size_t i = 0; i < s.origin_errors_by_code.size(); ++i) s.origin_errors_by_code[i] = 200 + i;
  s.origin_latency_sum_s = 1.25;
  return s;
}

void ExpectSame(const EngineStats& a, const EngineStats& b) {
  EXPECT_EQ(a.ufs_files, b.ufs_files);
  EXPECT_EQ(a.ufs_bytes, b.ufs_bytes);
  EXPECT_EQ(a.reads, b.reads);
  EXPECT_EQ(a.hit_reads, b.hit_reads);
  EXPECT_EQ(a.miss_reads, b.miss_reads);
  EXPECT_EQ(a.hit_bytes, b.hit_bytes);
  EXPECT_EQ(a.miss_bytes, b.miss_bytes);
  EXPECT_EQ(a.read_errors, b.read_errors);
  EXPECT_EQ(a.origin_requests, b.origin_requests);
  EXPECT_EQ(a.origin_bytes, b.origin_bytes);
  EXPECT_EQ(a.origin_errors, b.origin_errors);
  EXPECT_EQ(a.flight_joins, b.flight_joins);
  EXPECT_EQ(a.admitted, b.admitted);
  EXPECT_EQ(a.not_admitted, b.not_admitted);
  EXPECT_EQ(a.admit_errors, b.admit_errors);
  EXPECT_EQ(a.near_admitted, b.near_admitted);
  EXPECT_EQ(a.peer_blocks, b.peer_blocks);
  EXPECT_EQ(a.peer_bytes, b.peer_bytes);
  EXPECT_EQ(a.peer_fallbacks, b.peer_fallbacks);
  EXPECT_EQ(a.served_blocks, b.served_blocks);
  EXPECT_EQ(a.served_hits, b.served_hits);
  EXPECT_EQ(a.served_bytes, b.served_bytes);
  EXPECT_EQ(a.served_errors, b.served_errors);
  EXPECT_EQ(a.origin_latency_buckets, b.origin_latency_buckets);
  EXPECT_EQ(a.origin_latency_sum_s, b.origin_latency_sum_s);
  EXPECT_EQ(a.origin_errors_by_code, b.origin_errors_by_code);
}

TEST(EngineStatsJson, EveryFieldSurvivesTheTextRoundTrip) {
  const EngineStats s = Sample();
  auto back = EngineStatsFromJson(nlohmann::json::parse(ToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(s, *back);
}

TEST(EngineStatsJson, KeepsTheStatsFileNamesAndWritesHistogramsAsArrays) {
  const nlohmann::json j = ToJson(Sample());
  EXPECT_EQ(j["files"], 1);  // ufs_files: the stats file's name (docs/mount.md)
  EXPECT_EQ(j["bytes"], uint64_t{1} << 63);
  EXPECT_EQ(j["origin_requests"], 9);
  EXPECT_EQ(j["near_admitted"], 16);
  ASSERT_TRUE(j["origin_latency_buckets"].is_array());
  EXPECT_EQ(j["origin_latency_buckets"].size(), kOriginLatencyBuckets);
  EXPECT_EQ(j["origin_errors_by_code"].size(), kStatusCodes);
}

TEST(EngineStatsJson, AnOlderFileWithoutNewCountersReadsAsZeros) {
  auto back = EngineStatsFromJson(nlohmann::json::parse(R"({"files": 3, "reads": 7})"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ufs_files, 3u);
  EXPECT_EQ(back->reads, 7u);
  EXPECT_EQ(back->peer_blocks, 0u);
  EXPECT_EQ(back->origin_latency_buckets[0], 0u);
}

TEST(EngineStatsJson, ABadFieldIsAnErrorNamingIt) {
  auto negative = EngineStatsFromJson(nlohmann::json::parse(R"({"reads": -1})"));
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), Code::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("'reads'"), std::string::npos);

  EXPECT_FALSE(EngineStatsFromJson(nlohmann::json::parse(R"({"hit_bytes": "12"})")).ok());
  EXPECT_FALSE(EngineStatsFromJson(nlohmann::json::parse(R"({"reads": 1.5})")).ok());
  // Bucket counts of other bounds: not these histograms.
  EXPECT_FALSE(
      EngineStatsFromJson(nlohmann::json::parse(R"({"origin_latency_buckets": [1, 2]})")).ok());
  EXPECT_FALSE(EngineStatsFromJson(nlohmann::json::parse("[1, 2]")).ok());
}

}  // namespace
}  // namespace granary
