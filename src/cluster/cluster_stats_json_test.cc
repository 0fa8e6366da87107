// A node's cluster counters survive the stats file: every field written is
// read back, old files (no cluster fields yet) still read, bad ones name the field.
#include "cluster/cluster_stats_json.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

// Every field set, each to a different value.
ClusterStats Sample() {
  ClusterStats s{.self = "10.0.0.1:7070",
                 .membership = "static (3 peers)",
                 .members = 3,
                 .placement_generation = 4,
                 .peer_errors = {{"connect", 8}, {"timeout", 9}, {"checksum", 0}},
                 .peer_latency_sum_s = 0.75};
  s.peer_latency_buckets.resize(net::kPeerLatencyBuckets);
  for (size_t i = 0; i < s.peer_latency_buckets.size(); ++i) s.peer_latency_buckets[i] = 100 + i;
  s.server = net::PeerServerStats{.connections_accepted = 10,
                                  .connections_refused = 11,
                                  .connections_open = 12,
                                  .auth_failures = 13,
                                  .protocol_errors = 14,
                                  .busy_rejections = 15,
                                  .service_errors = 16,
                                  .bytes_sent = 17};
  for (size_t i = 0; i < s.server.requests_by_op.size(); ++i) s.server.requests_by_op[i] = 200 + i;
  return s;
}

void ExpectSame(const ClusterStats& a, const ClusterStats& b) {
  EXPECT_EQ(a.self, b.self);
  EXPECT_EQ(a.membership, b.membership);
  EXPECT_EQ(a.members, b.members);
  EXPECT_EQ(a.placement_generation, b.placement_generation);
  EXPECT_EQ(a.peer_errors, b.peer_errors);
  EXPECT_EQ(a.peer_latency_buckets, b.peer_latency_buckets);
  EXPECT_EQ(a.peer_latency_sum_s, b.peer_latency_sum_s);
  EXPECT_EQ(a.server.connections_accepted, b.server.connections_accepted);
  EXPECT_EQ(a.server.connections_refused, b.server.connections_refused);
  EXPECT_EQ(a.server.connections_open, b.server.connections_open);
  EXPECT_EQ(a.server.auth_failures, b.server.auth_failures);
  EXPECT_EQ(a.server.protocol_errors, b.server.protocol_errors);
  EXPECT_EQ(a.server.busy_rejections, b.server.busy_rejections);
  EXPECT_EQ(a.server.service_errors, b.server.service_errors);
  EXPECT_EQ(a.server.requests_by_op, b.server.requests_by_op);
  EXPECT_EQ(a.server.bytes_sent, b.server.bytes_sent);
}

TEST(ClusterStatsJson, EveryFieldSurvivesTheTextRoundTrip) {
  const ClusterStats s = Sample();
  auto back = ClusterStatsFromJson(nlohmann::json::parse(ToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(s, *back);
}

TEST(ClusterStatsJson, ErrorsByKindAreAnObjectAndLatencyAnArray) {
  const nlohmann::json j = ToJson(Sample());
  EXPECT_EQ(j["peer_errors"]["timeout"], 9);
  ASSERT_TRUE(j["peer_latency_buckets"].is_array());
  EXPECT_EQ(j["peer_latency_buckets"].size(), net::kPeerLatencyBuckets);
  EXPECT_EQ(j["server"]["auth_failures"], 13);
}

TEST(ClusterStatsJson, AnOlderFileWithFewerFieldsStillReads) {
  auto back = ClusterStatsFromJson(nlohmann::json::parse(R"({"self": "a:1", "members": 2})"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->self, "a:1");
  EXPECT_EQ(back->members, 2u);
  EXPECT_TRUE(back->peer_latency_buckets.empty());
  EXPECT_EQ(back->server.bytes_sent, 0u);
}

TEST(ClusterStatsJson, ABadFieldIsAnErrorNamingIt) {
  auto errors = ClusterStatsFromJson(nlohmann::json::parse(R"({"peer_errors": {"connect": -1}})"));
  ASSERT_FALSE(errors.ok());
  EXPECT_NE(errors.status().message().find("'peer_errors'"), std::string::npos);
  auto buckets = ClusterStatsFromJson(nlohmann::json::parse(R"({"peer_latency_buckets": [1, 2]})"));
  ASSERT_FALSE(buckets.ok());
  EXPECT_NE(buckets.status().message().find("peer_latency_buckets"), std::string::npos);
  auto server = ClusterStatsFromJson(nlohmann::json::parse(R"({"server": {"bytes_sent": "x"}})"));
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("server"), std::string::npos);
  EXPECT_FALSE(ClusterStatsFromJson(nlohmann::json::parse(R"({"server": 1})")).ok());
}

}  // namespace
}  // namespace granary
