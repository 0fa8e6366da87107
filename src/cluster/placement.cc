// Placement implementation: weighted rendezvous hashing. See placement.h.
#include "cluster/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace granary::cluster {
namespace {

// Score order: higher score first, then node_id for a deterministic tie-break.
struct Scored {
  double score;
  const Member* member;
};

bool Better(const Scored& a, const Scored& b) {
  if (a.score != b.score) return a.score > b.score;
  return a.member->node_id < b.member->node_id;
}

}  // namespace

uint64_t NodeSeed(std::string_view node_id) { return XXH3_64bits(node_id.data(), node_id.size()); }

// U in (0, 1) for a member and a key: 53 hash bits mapped to the open
// interval, never 0 or 1, so ln(U) < 0.
static double HrwUniform(uint64_t node_seed, std::string_view placement_key) {
  const uint64_t h = XXH3_64bits_withSeed(placement_key.data(), placement_key.size(), node_seed);
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

double HrwScore(uint64_t node_seed, double weight, std::string_view placement_key) {
  return -weight / std::log(HrwUniform(node_seed, placement_key));
}

double Placement::Score(size_t i, std::string_view placement_key) const {
  // With one weight for all, -w / ln(U) orders members exactly as U does:
  // skip the logarithm (most of the cost of a lookup).
  if (equal_weights_) return HrwUniform(seeds_[i], placement_key);
  return HrwScore(seeds_[i], static_cast<double>(members_[i].capacity), placement_key);
}

Placement::Placement(std::vector<Member> members, uint64_t generation)
    : members_(std::move(members)), generation_(generation) {
  std::stable_sort(members_.begin(), members_.end(),
                   [](const Member& a, const Member& b) { return a.node_id < b.node_id; });
  members_.erase(
      std::unique(members_.begin(), members_.end(),
                  [](const Member& a, const Member& b) { return a.node_id == b.node_id; }),
      members_.end());
  seeds_.reserve(members_.size());
  uint64_t weight = 0;  // the one positive weight seen so far
  for (const Member& m : members_) {
    seeds_.push_back(NodeSeed(m.node_id));
    total_capacity_ += m.capacity;
    if (m.capacity == 0) continue;
    if (weight != 0 && m.capacity != weight) equal_weights_ = false;
    weight = m.capacity;
  }
}

std::vector<const Member*> Placement::Rank(std::string_view placement_key, size_t n) const {
  std::vector<const Member*> out;
  if (n == 0) return out;
  if (n == 1) {
    if (const Member* m = Owner(placement_key)) out.push_back(m);
    return out;
  }
  std::vector<Scored> scored;
  scored.reserve(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].capacity == 0) continue;
    scored.push_back({Score(i, placement_key), &members_[i]});
  }
  n = std::min(n, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n), scored.end(),
                    Better);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(scored[i].member);
  return out;
}

const Member* Placement::Owner(std::string_view placement_key) const {
  std::optional<Scored> best;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].capacity == 0) continue;
    Scored s{Score(i, placement_key), &members_[i]};
    if (!best || Better(s, *best)) best = s;
  }
  return best ? best->member : nullptr;
}

const Member* Placement::Find(std::string_view node_id) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), node_id,
                             [](const Member& m, std::string_view id) { return m.node_id < id; });
  return it != members_.end() && it->node_id == node_id ? &*it : nullptr;
}

std::string PlacementKey(std::string_view dataset, std::string_view key, uint64_t object_size,
                         uint64_t block, uint64_t block_size) {
  std::string out;
  out.reserve(dataset.size() + key.size() + 32);
  out += std::to_string(dataset.size());
  out += ':';
  out += dataset;
  out += std::to_string(key.size());
  out += ':';
  out += key;
  if (block_size != 0 && object_size > block_size) {
    out += '#';
    out += std::to_string(block);
  }
  return out;
}

}  // namespace granary::cluster
