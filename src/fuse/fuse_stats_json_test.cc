// The FUSE server's counters survive the stats file: every field written is
// read back, the session fields beside them are ignored, bad ones name the field.
#include "fuse/fuse_stats_json.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

// Every field set, each to a different value.
FuseStats Sample() {
  FuseStats s{.requests = 1,
              .errors = 2,
              .passthrough_opens = 3,
              .userspace_opens = 4,
              .userspace_reads = 5,
              .userspace_read_bytes = uint64_t{1} << 63,
              .backing_ids_open = 7,
              .backing_open_failures = 8,
              .uring_requests = 9,
              .dirs_prefetched = 10,
              .stores = 11,
              .store_bytes = 12};
  for (size_t i = 0; i < s.requests_by_opcode.size(); ++i) s.requests_by_opcode[i] = 100 + i;
  return s;
}

void ExpectSame(const FuseStats& a, const FuseStats& b) {
  EXPECT_EQ(a.requests_by_opcode, b.requests_by_opcode);
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.errors, b.errors);
  EXPECT_EQ(a.passthrough_opens, b.passthrough_opens);
  EXPECT_EQ(a.userspace_opens, b.userspace_opens);
  EXPECT_EQ(a.userspace_reads, b.userspace_reads);
  EXPECT_EQ(a.userspace_read_bytes, b.userspace_read_bytes);
  EXPECT_EQ(a.backing_ids_open, b.backing_ids_open);
  EXPECT_EQ(a.backing_open_failures, b.backing_open_failures);
  EXPECT_EQ(a.uring_requests, b.uring_requests);
  EXPECT_EQ(a.dirs_prefetched, b.dirs_prefetched);
  EXPECT_EQ(a.stores, b.stores);
  EXPECT_EQ(a.store_bytes, b.store_bytes);
}

TEST(FuseStatsJson, EveryFieldSurvivesTheTextRoundTrip) {
  const FuseStats s = Sample();
  auto back = FuseStatsFromJson(nlohmann::json::parse(ToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(s, *back);
}

TEST(FuseStatsJson, ReadsTheStatsFilesFuseObjectWithItsSessionFields) {
  nlohmann::json j = ToJson(Sample());
  EXPECT_EQ(j["passthrough_opens"], 3);
  EXPECT_EQ(j["requests_by_opcode"].size(), 64u);
  // What the stats file adds beside the counters.
  j["read_mode"] = "passthrough";
  j["transport"] = "dev";
  j["passthrough"] = true;
  j["threads"] = 16;
  auto back = FuseStatsFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(Sample(), *back);
}

TEST(FuseStatsJson, ABadFieldIsAnErrorNamingIt) {
  auto bad = FuseStatsFromJson(nlohmann::json::parse(R"({"stores": "many"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'stores'"), std::string::npos);
  EXPECT_FALSE(FuseStatsFromJson(nlohmann::json::parse(R"({"requests_by_opcode": [1]})")).ok());
  auto old = FuseStatsFromJson(nlohmann::json::parse(R"({"requests": 5})"));
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->requests, 5u);
  EXPECT_EQ(old->stores, 0u);
}

}  // namespace
}  // namespace granary
