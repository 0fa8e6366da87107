// Unit tests of the etcd gateway helpers (no etcd needed): base64, prefix
// range ends, endpoint validation, member values. The calls against a real
// etcd are in tests/integration/cluster/etcd_membership_test.cc.
#include "cluster/etcd_client.h"

#include <gtest/gtest.h>

#include "cluster/etcd_membership.h"

namespace granary::cluster {
namespace {

TEST(EtcdClientTest, Base64RoundTrips) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("/granary/c/d/members/"), "L2dyYW5hcnkvYy9kL21lbWJlcnMv");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n < all.size(); n += 37) {
    auto back = Base64Decode(Base64Encode(all.substr(0, n)));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, all.substr(0, n));
  }
  EXPECT_FALSE(Base64Decode("abc").ok());
  EXPECT_FALSE(Base64Decode("ab!d").ok());
}

TEST(EtcdClientTest, PrefixRangeEndIsTheNextKey) {
  EXPECT_EQ(PrefixRangeEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST(EtcdClientTest, CreateRejectsBadEndpoints) {
  for (const char* bad : {"127.0.0.1:2379", "https://h:2379", "http://h", "http://h:0", ""}) {
    auto r = EtcdClient::Create({bad}, std::chrono::milliseconds(1000));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(EtcdClient::Create({}, std::chrono::milliseconds(1000)).ok());
  auto ok = EtcdClient::Create({"http://127.0.0.1:2379/", "http://[::1]:2379"},
                               std::chrono::milliseconds(1000));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->endpoints_text(), "http://127.0.0.1:2379,http://[::1]:2379");
}

TEST(EtcdClientTest, MemberValueRoundTrips) {
  Member m{.node_id = "n1",
           .address = "10.0.0.1:7070",
           .capacity = 1ull << 40,
           .started_unix_ms = 1700000000123};
  const std::string v = EncodeMemberValue(m);
  EXPECT_NE(v.find("\"address\":\"10.0.0.1:7070\""), std::string::npos) << v;
  auto back = DecodeMemberValue("n1", v);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  EXPECT_FALSE(DecodeMemberValue("n1", "not json").ok());
  EXPECT_FALSE(DecodeMemberValue("n1", R"({"address":"nope"})").ok());
}

TEST(EtcdMembershipTest, UnreachableEtcdFailsFastWithAClearError) {
  EtcdMembership m(EtcdMembershipOptions{.endpoints = {"http://127.0.0.1:1"},
                                         .cluster = "c",
                                         .dataset = "d",
                                         .self = {.address = "127.0.0.1:7070", .capacity = 1}});
  Status s = m.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("etcd http://127.0.0.1:1: connect failed"), std::string::npos)
      << s.message();
  m.Stop();
}

TEST(EtcdMembershipTest, BadOptionsAreInvalidArgument) {
  EtcdMembership no_cluster(EtcdMembershipOptions{.endpoints = {"http://127.0.0.1:1"},
                                                  .dataset = "d",
                                                  .self = {.address = "h:1", .capacity = 1}});
  EXPECT_EQ(no_cluster.Start().code(), Code::kInvalidArgument);
  EtcdMembership bad_endpoint(EtcdMembershipOptions{.endpoints = {"etcd:2379"},
                                                    .cluster = "c",
                                                    .dataset = "d",
                                                    .self = {.address = "h:1", .capacity = 1}});
  EXPECT_EQ(bad_endpoint.Start().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace granary::cluster
