// Placement tests: HRW balance (equal and weighted), minimal movement on
// leave/join, determinism independent of member order, the placement key.
#include "cluster/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace granary::cluster {
namespace {

std::vector<Member> MakeMembers(int n, uint64_t capacity) {
  std::vector<Member> out;
  for (int i = 0; i < n; ++i) {
    std::string addr =
        "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + ":7070";
    out.push_back(Member{.node_id = addr, .address = addr, .capacity = capacity});
  }
  return out;
}

std::string Key(int i) {
  return PlacementKey("imagenet", "train/n01440764/img_" + std::to_string(i) + ".JPEG", 110'000, 0,
                      4 << 20);
}

// Keys per member for `keys` keys.
std::map<std::string, int> Count(const Placement& p, int keys) {
  std::map<std::string, int> count;
  for (int i = 0; i < keys; ++i) ++count[p.Owner(Key(i))->node_id];
  return count;
}

TEST(PlacementTest, EqualWeightsBalanceWithin5Percent) {
  Placement p(MakeMembers(100, 1 << 30));
  constexpr int kKeys = 1'000'000;
  auto count = Count(p, kKeys);
  ASSERT_EQ(count.size(), 100u);
  const double mean = kKeys / 100.0;
  int max = 0;
  for (auto& [id, c] : count) max = std::max(max, c);
  EXPECT_LE(max / mean, 1.05) << "max " << max << " mean " << mean;
}

TEST(PlacementTest, WeightedSharesFollowCapacity) {
  std::vector<Member> members = MakeMembers(100, 1 << 30);
  for (int i = 50; i < 100; ++i) members[i].capacity = 2u << 30;  // 50 at 1x, 50 at 2x
  Placement p(members);
  constexpr int kKeys = 600'000;
  auto count = Count(p, kKeys);
  // Per unit of weight, every member should get the same number of keys.
  const double per_weight_mean = kKeys / 150.0;
  double worst = 0, sum_small = 0, sum_big = 0;
  for (const Member& m : p.members()) {
    const double w = static_cast<double>(m.capacity >> 30);
    const double per_weight = count[m.node_id] / w;
    worst = std::max(worst, per_weight / per_weight_mean);
    (w == 1 ? sum_small : sum_big) += count[m.node_id];
  }
  EXPECT_LE(worst, 1.08);
  // The 2x half owns 2/3 of the keys, within 1 %.
  EXPECT_NEAR(sum_big / kKeys, 2.0 / 3.0, 0.01);
  EXPECT_NEAR(sum_small / kKeys, 1.0 / 3.0, 0.01);
}

TEST(PlacementTest, RemovingAMemberMovesOnlyItsKeys) {
  std::vector<Member> members = MakeMembers(50, 1 << 30);
  Placement before(members);
  const std::string gone = members[17].node_id;
  members.erase(members.begin() + 17);
  Placement after(members);
  int moved = 0;
  for (int i = 0; i < 100'000; ++i) {
    const std::string k = Key(i);
    const std::string& was = before.Owner(k)->node_id;
    const std::string& now = after.Owner(k)->node_id;
    if (was == gone) {
      ++moved;
      // The key goes to its second choice before the change.
      EXPECT_EQ(now, before.Rank(k, 2)[1]->node_id);
    } else {
      EXPECT_EQ(was, now) << k;
    }
  }
  EXPECT_GT(moved, 0);
}

TEST(PlacementTest, AddingAMemberMovesKeysOnlyToIt) {
  std::vector<Member> members = MakeMembers(50, 1 << 30);
  Placement before(members);
  members.push_back(Member{.node_id = "new:7070", .address = "new:7070", .capacity = 1 << 30});
  Placement after(members);
  int moved = 0;
  for (int i = 0; i < 100'000; ++i) {
    const std::string k = Key(i);
    const std::string& was = before.Owner(k)->node_id;
    const std::string& now = after.Owner(k)->node_id;
    if (was != now) {
      ++moved;
      EXPECT_EQ(now, "new:7070");
    }
  }
  // About 1/51 of the keys.
  EXPECT_NEAR(moved / 100'000.0, 1.0 / 51, 0.004);
}

TEST(PlacementTest, RankIsIndependentOfMemberOrder) {
  std::vector<Member> members = MakeMembers(30, 1 << 30);
  members[3].capacity = 3u << 30;
  Placement a(members);
  std::mt19937 rng(42);
  std::shuffle(members.begin(), members.end(), rng);
  Placement b(members);
  for (int i = 0; i < 2000; ++i) {
    auto ra = a.Rank(Key(i), 5);
    auto rb = b.Rank(Key(i), 5);
    ASSERT_EQ(ra.size(), 5u);
    ASSERT_EQ(rb.size(), 5u);
    for (size_t j = 0; j < 5; ++j) EXPECT_EQ(ra[j]->node_id, rb[j]->node_id);
    EXPECT_EQ(a.Owner(Key(i)), ra[0]);
    // Rank(n) is a prefix of Rank(n + 1).
    auto ra3 = a.Rank(Key(i), 3);
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(ra3[j], ra[j]);
  }
}

TEST(PlacementTest, RankListsDistinctMembersAndSkipsZeroCapacity) {
  std::vector<Member> members = MakeMembers(5, 1 << 30);
  members[2].capacity = 0;  // a client-only member
  Placement p(members);
  for (int i = 0; i < 1000; ++i) {
    auto r = p.Rank(Key(i), 10);
    ASSERT_EQ(r.size(), 4u);
    std::set<std::string> ids;
    for (const Member* m : r) {
      EXPECT_NE(m->node_id, members[2].node_id);
      ids.insert(m->node_id);
    }
    EXPECT_EQ(ids.size(), 4u);
  }
  EXPECT_TRUE(p.Rank("k", 0).empty());
  EXPECT_EQ(p.members().size(), 5u);
  EXPECT_EQ(p.total_capacity(), 4ull << 30);
}

TEST(PlacementTest, NoCapacityMeansNoOwner) {
  Placement empty({});
  EXPECT_EQ(empty.Owner("k"), nullptr);
  EXPECT_TRUE(empty.Rank("k", 3).empty());
  Placement clients({Member{.node_id = "a:1", .address = "a:1", .capacity = 0}});
  EXPECT_EQ(clients.Owner("k"), nullptr);
}

TEST(PlacementTest, MembersSortedDedupedAndFindable) {
  Placement p({Member{.node_id = "b:1", .address = "b:1", .capacity = 1},
               Member{.node_id = "a:1", .address = "a:1", .capacity = 2},
               Member{.node_id = "b:1", .address = "b:2", .capacity = 3}},
              7);
  ASSERT_EQ(p.members().size(), 2u);
  EXPECT_EQ(p.members()[0].node_id, "a:1");
  EXPECT_EQ(p.members()[1].address, "b:1");  // the first of the duplicates wins
  EXPECT_EQ(p.generation(), 7u);
  ASSERT_NE(p.Find("a:1"), nullptr);
  EXPECT_EQ(p.Find("a:1")->capacity, 2u);
  EXPECT_EQ(p.Find("c:1"), nullptr);
}

TEST(PlacementTest, PlacementKeyWholeObjectOrPerBlock) {
  constexpr uint64_t kBlock = 4 << 20;
  // Small objects: one key for every block index (there is only block 0).
  EXPECT_EQ(PlacementKey("d", "k", kBlock, 0, kBlock), PlacementKey("d", "k", 100, 0, kBlock));
  EXPECT_EQ(PlacementKey("d", "k", 100, 0, kBlock), PlacementKey("d", "k", 100, 5, kBlock));
  // Large objects: one key per block.
  EXPECT_NE(PlacementKey("d", "k", kBlock + 1, 0, kBlock),
            PlacementKey("d", "k", kBlock + 1, 1, kBlock));
  EXPECT_NE(PlacementKey("d", "k", kBlock + 1, 0, kBlock), PlacementKey("d", "k", 100, 0, kBlock));
  // No ambiguity between dataset and key boundaries.
  EXPECT_NE(PlacementKey("ab", "c", 1, 0, kBlock), PlacementKey("a", "bc", 1, 0, kBlock));
  EXPECT_NE(PlacementKey("d", "k#1", 1, 0, kBlock), PlacementKey("d", "k", 2 * kBlock, 1, kBlock));
}

// Rank is the order of HrwScore, with equal weights (where the logarithm is
// skipped) and with mixed ones.
TEST(PlacementTest, RankIsTheOrderOfHrwScores) {
  for (bool mixed : {false, true}) {
    std::vector<Member> members = MakeMembers(20, 1 << 30);
    if (mixed) members[4].capacity = 5u << 30;
    Placement p(members);
    for (int i = 0; i < 500; ++i) {
      const std::string k = Key(i);
      auto r = p.Rank(k, 20);
      ASSERT_EQ(r.size(), 20u);
      for (size_t j = 1; j < r.size(); ++j) {
        EXPECT_GT(HrwScore(NodeSeed(r[j - 1]->node_id), double(r[j - 1]->capacity), k),
                  HrwScore(NodeSeed(r[j]->node_id), double(r[j]->capacity), k));
      }
    }
  }
}

TEST(PlacementTest, HrwScoreGrowsWithWeight) {
  const uint64_t seed = NodeSeed("n:1");
  EXPECT_DOUBLE_EQ(HrwScore(seed, 2.0, "k"), 2 * HrwScore(seed, 1.0, "k"));
  EXPECT_GT(HrwScore(seed, 1.0, "k"), 0.0);
}

}  // namespace
}  // namespace granary::cluster
