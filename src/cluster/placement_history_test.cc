// PlacementHistory: which earlier owners a node asks after joins and leaves,
// and when it stops asking.
#include "cluster/placement_history.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace granary::cluster {
namespace {

Member M(const std::string& id, uint64_t capacity = 1) {
  return Member{.node_id = id, .address = id + ":7070", .capacity = capacity};
}

std::shared_ptr<const Placement> P(std::vector<Member> members) {
  return std::make_shared<const Placement>(std::move(members));
}

std::string Key(int i) {
  return PlacementKey("ds", "train/img_" + std::to_string(i), 1000, 0, 4096);
}

std::vector<std::string> Ids(const std::vector<Member>& members) {
  std::vector<std::string> out;
  for (const Member& m : members) out.push_back(m.node_id);
  return out;
}

// A node that joins asks, for each key it now owns, the key's owner before
// it joined: with rendezvous hashing that is its next candidate now.
TEST(PlacementHistoryTest, AJoiningNodeAsksThePreviousOwnerOfEachKeyItNowOwns) {
  auto before = P({M("a"), M("b"), M("c")});
  auto after = P({M("a"), M("b"), M("c"), M("d")});
  PlacementHistory d("d", 1);
  d.Record(before, *after);
  ASSERT_EQ(d.kept(), 1u);
  int gained = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string k = Key(i);
    const auto owners = d.PreviousOwners(k);
    if (after->Owner(k)->node_id != "d") continue;
    ++gained;
    ASSERT_EQ(Ids(owners), std::vector<std::string>{before->Owner(k)->node_id});
    EXPECT_EQ(after->Rank(k, 2)[1]->node_id, before->Owner(k)->node_id);
  }
  EXPECT_GT(gained, 350);  // about a quarter
}

// An old member gains nothing on a join: whatever it owns now it owned
// before, so it asks nobody.
TEST(PlacementHistoryTest, AMemberThatOwnedTheKeyBeforeAsksNobody) {
  auto before = P({M("a"), M("b"), M("c")});
  auto after = P({M("a"), M("b"), M("c"), M("d")});
  PlacementHistory a("a", 1);
  a.Record(before, *after);
  for (int i = 0; i < 2000; ++i) {
    if (after->Owner(Key(i))->node_id == "a") {
      EXPECT_TRUE(a.PreviousOwners(Key(i)).empty());
    }
  }
}

// The members that stay take over a leaving member's keys from it.
TEST(PlacementHistoryTest, AfterALeaveTheLeaverIsTheEarlierOwnerOfItsKeys) {
  auto before = P({M("a"), M("b"), M("c"), M("d")});
  auto after = P({M("a"), M("b"), M("c")});
  PlacementHistory b("b", 1);
  b.Record(before, *after);
  int taken = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string k = Key(i);
    if (after->Owner(k)->node_id != "b") continue;
    const auto owners = b.PreviousOwners(k);
    if (before->Owner(k)->node_id == "d") {
      ++taken;
      EXPECT_EQ(Ids(owners), std::vector<std::string>{"d"});
    } else {
      EXPECT_TRUE(owners.empty());
    }
  }
  EXPECT_GT(taken, 100);
}

// Several changes in a row (3 -> 5 -> 2): each key's holders under every
// kept set are asked, newest set first, until the pass covering them ends.
TEST(PlacementHistoryTest, SeveralChangesKeepEveryEarlierHolderUntilForgotten) {
  auto three = P({M("a"), M("b"), M("c")});
  auto five = P({M("a"), M("b"), M("c"), M("d"), M("e")});
  auto two = P({M("a"), M("b")});
  PlacementHistory a("a", 1);
  const uint64_t g1 = a.Record(three, *five);
  const uint64_t g2 = a.Record(five, *two);
  EXPECT_EQ(a.kept(), 2u);
  for (int i = 0; i < 2000; ++i) {
    const std::string k = Key(i);
    if (two->Owner(k)->node_id != "a") continue;
    std::vector<std::string> want;
    for (const auto& p : {five, three}) {
      const std::string o = p->Owner(k)->node_id;
      if (o != "a" && std::find(want.begin(), want.end(), o) == want.end()) want.push_back(o);
    }
    EXPECT_EQ(Ids(a.PreviousOwners(k)), want) << k;
  }
  a.Forget(g1);
  EXPECT_EQ(a.kept(), 1u);
  a.Forget(g2);
  EXPECT_EQ(a.kept(), 0u);
  EXPECT_TRUE(a.PreviousOwners(Key(1)).empty());
}

// A client-only node (capacity 0) owns nothing, so it keeps nothing; nor
// does the first member of a cluster (nobody held anything before it).
TEST(PlacementHistoryTest, NothingIsKeptWhenNobodyElseCouldHoldThisNodesShare) {
  PlacementHistory client("x", 1);
  client.Record(P({M("a"), M("b")}), *P({M("a"), M("b"), M("x", 0)}));
  EXPECT_EQ(client.kept(), 0u);
  PlacementHistory first("a", 1);
  const uint64_t g = first.Record(P({}), *P({M("a")}));
  EXPECT_EQ(first.kept(), 0u);
  EXPECT_EQ(g, 1u);
}

// With replicas, a key is asked of every earlier owner this node was not.
TEST(PlacementHistoryTest, WithReplicasEveryEarlierOwnerIsAsked) {
  auto before = P({M("a"), M("b"), M("c")});
  auto after = P({M("a"), M("b"), M("c"), M("d")});
  PlacementHistory d("d", 2);
  d.Record(before, *after);
  for (int i = 0; i < 500; ++i) {
    const std::string k = Key(i);
    const auto owners = before->Rank(k, 2);
    EXPECT_EQ(Ids(d.PreviousOwners(k)),
              (std::vector<std::string>{owners[0]->node_id, owners[1]->node_id}));
  }
}

}  // namespace
}  // namespace granary::cluster
