// Tests of peer-list / HOST:PORT parsing and StaticMembership.
#include "cluster/membership.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cluster/static_membership.h"

namespace granary::cluster {
namespace {

TEST(ParseHostPortTest, AcceptsHostNamesIpv4AndBracketedIpv6) {
  auto a = ParseHostPort("worker-0.svc-worker:7070");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "worker-0.svc-worker");
  EXPECT_EQ(a->port, 7070);
  auto b = ParseHostPort("10.1.2.3:1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "10.1.2.3");
  auto c = ParseHostPort("[fd00::1]:65535");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "fd00::1");
  EXPECT_TRUE(c->ipv6);
  EXPECT_EQ(c->port, 65535);
  EXPECT_TRUE(ParseHostPort("localhost:2379").ok());
}

TEST(ParseHostPortTest, RejectsMalformedAddresses) {
  for (const char* bad : {"foo", "foo:", ":7070", "foo:0", "foo:65536", "foo:70x", "foo:-1",
                          "256.1.1.1:80", "1.2.3:80", "fd00::1:7070", "[fd00::1]7070", "[zz::1]:80",
                          "[fd00::1]:", "-bad:80", "a..b:80", "a_b:80", "h:80 "}) {
    auto r = ParseHostPort(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
      EXPECT_NE(r.status().message().find(std::string("'") + bad + "' is not HOST:PORT"),
                std::string::npos)
          << r.status().message();
    }
  }
}

TEST(ParsePeerListTest, ParsesEntriesWithDefaultCapacity) {
  auto r = ParsePeerList(" h1:7070, 10.0.0.2:7070 ,[::1]:7071", 1000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0], (Member{.node_id = "h1:7070", .address = "h1:7070", .capacity = 1000}));
  EXPECT_EQ((*r)[1].address, "10.0.0.2:7070");
  EXPECT_EQ((*r)[2].node_id, "[::1]:7071");
  auto empty = ParsePeerList("  ", 1);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ParsePeerListTest, ErrorsNameTheBadEntry) {
  auto bad = ParsePeerList("h1:7070,foo,h3:7070", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "--cluster-peers: 'foo' is not HOST:PORT");
  auto dup = ParsePeerList("h1:7070,h1:7070", 1);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(), "--cluster-peers: 'h1:7070' is listed twice");
  auto hole = ParsePeerList("h1:7070,,h2:7070", 1);
  ASSERT_FALSE(hole.ok());
  EXPECT_NE(hole.status().message().find("empty entry"), std::string::npos);
  EXPECT_FALSE(ParsePeerList("h1:7070,", 1).ok());
}

TEST(StaticMembershipTest, AddsSelfWhenNotListed) {
  auto peers = ParsePeerList("h1:7070,h2:7070", 100);
  ASSERT_TRUE(peers.ok());
  StaticMembership m(*peers, Member{.address = "h3:7070", .capacity = 0});
  ASSERT_TRUE(m.Start().ok());
  auto p = m.placement();
  ASSERT_EQ(p->members().size(), 3u);
  ASSERT_NE(p->Find("h3:7070"), nullptr);
  EXPECT_EQ(p->Find("h3:7070")->capacity, 0u);  // a client-only node owns nothing
  EXPECT_EQ(m.Describe(), "static, 3 peers");
}

TEST(StaticMembershipTest, KeepsTheListedEntryForSelf) {
  auto peers = ParsePeerList("h1:7070,h2:7070", 100);
  ASSERT_TRUE(peers.ok());
  StaticMembership m(*peers, Member{.address = "h2:7070", .capacity = 5});
  ASSERT_TRUE(m.Start().ok());
  ASSERT_EQ(m.placement()->members().size(), 2u);
  EXPECT_EQ(m.placement()->Find("h2:7070")->capacity, 100u);  // same view on every node
  EXPECT_EQ(m.Describe(), "static, 2 peers");
  m.Stop();
  m.Stop();  // idempotent
}

TEST(StaticMembershipTest, StartRejectsBadMembers) {
  StaticMembership bad_addr({Member{.address = "nope", .capacity = 1}},
                            Member{.address = "h1:1", .capacity = 1});
  Status s = bad_addr.Start();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'nope' is not HOST:PORT"), std::string::npos) << s.message();
  StaticMembership no_capacity({}, Member{.address = "h1:1", .capacity = 0});
  EXPECT_EQ(no_capacity.Start().code(), Code::kInvalidArgument);
}

TEST(PeerListFileTest, TakesCommasSpacesNewlinesAndComments) {
  EXPECT_EQ(PeerListFromFileText("# the cache nodes\nh1:7070\nh2:7070, h3:7070 # rack b\n\n"
                                 "  h4:7070\th5:7070\n#h6:7070\n"),
            "h1:7070,h2:7070,h3:7070,h4:7070,h5:7070");
  EXPECT_EQ(PeerListFromFileText(" \n# nothing\n"), "");
}

TEST(PeerListFileTest, AMissingOrEmptyFileIsAnError) {
  const std::string dir = ::testing::TempDir();
  auto missing = ReadPeerListFile(dir + "/no-such-peers");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-peers"), std::string::npos);
  const std::string empty = dir + "/empty-peers";
  std::ofstream(empty) << "# all gone\n";
  auto none = ReadPeerListFile(empty);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "peer list file " + empty + " lists no member");
  const std::string good = dir + "/good-peers";
  std::ofstream(good) << "h1:7070\nh2:7070\n";
  auto list = ReadPeerListFile(good);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(*list, "h1:7070,h2:7070");
  std::filesystem::remove(empty);
  std::filesystem::remove(good);
}

TEST(StaticMembershipTest, AnUpdatedListIsANewViewForTheCallbacks) {
  auto three = ParsePeerList("h1:7070,h2:7070,h3:7070", 1);
  auto four = ParsePeerList("h1:7070,h2:7070,h3:7070,h4:7070", 1);
  ASSERT_TRUE(three.ok() && four.ok());
  StaticMembership m(*three, Member{.address = "h1:7070", .capacity = 1});
  ASSERT_TRUE(m.Start().ok());
  std::vector<std::shared_ptr<const Placement>> seen;
  m.OnChange([&](const std::shared_ptr<const Placement>& p) { seen.push_back(p); });

  auto grown = m.Update(*four);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_TRUE(*grown);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]->members().size(), 4u);
  EXPECT_EQ(seen[0]->generation(), 1u);
  EXPECT_EQ(m.placement(), seen[0]);
  EXPECT_EQ(m.Describe(), "static, 4 peers");

  // The same set in another order is no change.
  auto shuffled = ParsePeerList("h4:7070,h3:7070,h2:7070,h1:7070", 1);
  ASSERT_TRUE(shuffled.ok());
  auto same = m.Update(*shuffled);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(*same);
  EXPECT_EQ(seen.size(), 1u);

  // A bad list is refused and the current view kept.
  auto bad = m.Update({Member{.address = "nope", .capacity = 1}});
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(m.placement()->members().size(), 4u);

  // A list without this node still has it (its own view; the others decide).
  auto shrunk = m.Update(*ParsePeerList("h2:7070,h3:7070", 1));
  ASSERT_TRUE(shrunk.ok());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1]->members().size(), 3u);
  EXPECT_NE(seen[1]->Find("h1:7070"), nullptr);
  EXPECT_EQ(seen[1]->generation(), 2u);
}

}  // namespace
}  // namespace granary::cluster
