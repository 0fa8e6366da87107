// Placement: which cluster members own a block, by weighted rendezvous (HRW)
// hashing over a fixed member set.
//
// Rule: for a placement key k and a member m with weight w = m.capacity > 0,
//   h = XXH3_64(k, seed = XXH3_64(m.node_id)),  U = (h>>11 + 0.5) / 2^53 in (0,1),
//   score(m, k) = -w / ln(U)            (the logarithmic method)
// Members are ranked by score, highest first; equal scores (practically never)
// fall back to node_id order. (When all weights are equal, U alone is
// compared: the same order, without the logarithm.) Each member's share of keys is w / sum(w), and
// because a member's score depends only on its own id and the key, removing a
// member moves only the keys it owned and adding one moves keys only to it.
// The hash is fixed (xxh3-64, never std::hash), so every process agrees.
//
// Invariants: members() is sorted by node_id with unique node ids (the
// constructor sorts and drops later duplicates); a Placement never changes
// after construction.
//
// Thread safety: immutable; share freely as std::shared_ptr<const Placement>.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace granary::cluster {

// One cluster member as every node sees it.
struct Member {
  std::string node_id;    // unique; by default the advertised address
  std::string address;    // HOST:PORT of its peer server
  uint64_t capacity = 0;  // bytes of cache; the HRW weight (0 = owns nothing: a client-only member)
  int64_t started_unix_ms = 0;  // when the member joined (informational)
  bool operator==(const Member&) const = default;
};

class Placement {
 public:
  // `generation` numbers successive views of one membership (0 for the first).
  explicit Placement(std::vector<Member> members, uint64_t generation = 0);

  // Members ordered by HRW score for `placement_key`, best first, at most n.
  // Members with capacity 0 never appear. Pointers stay valid as long as this
  // Placement lives.
  std::vector<const Member*> Rank(std::string_view placement_key, size_t n) const;

  // The best member for `placement_key` (Rank(key, 1) without allocating), or
  // nullptr when no member has capacity.
  const Member* Owner(std::string_view placement_key) const;

  // The member with this node id, or nullptr.
  const Member* Find(std::string_view node_id) const;

  // All members (including capacity-0 ones), sorted by node_id.
  const std::vector<Member>& members() const { return members_; }
  uint64_t generation() const { return generation_; }
  // Sum of the members' capacities.
  uint64_t total_capacity() const { return total_capacity_; }

 private:
  // A value ordered like member i's HRW score for the key.
  double Score(size_t i, std::string_view placement_key) const;

  std::vector<Member> members_;
  std::vector<uint64_t> seeds_;  // seeds_[i] = XXH3_64(members_[i].node_id)
  uint64_t generation_ = 0;
  uint64_t total_capacity_ = 0;
  bool equal_weights_ = true;  // every member with capacity has the same capacity
};

// The HRW score of a member (given its node-id seed and weight) for a key;
// exposed for tests and the placement simulator.
double HrwScore(uint64_t node_seed, double weight, std::string_view placement_key);
// XXH3_64 of a node id: the per-member seed of HrwScore.
uint64_t NodeSeed(std::string_view node_id);

// The placement key of a block: objects up to one block (object_size <=
// block_size, or block_size 0) are placed whole by (dataset, key); larger ones
// per (dataset, key, block). Length-prefixed, so distinct inputs never collide.
std::string PlacementKey(std::string_view dataset, std::string_view key, uint64_t object_size,
                         uint64_t block, uint64_t block_size);

}  // namespace granary::cluster
