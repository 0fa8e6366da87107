// placement_sim: how evenly weighted HRW placement (src/cluster/placement.h)
// spreads an ImageNet-like dataset over 100 nodes, and how many objects move
// when one node leaves or joins, against the ideal.
//
// Usage: placement_sim [OBJECTS] (default 1,281,167: ImageNet-1k train).
// Object sizes: log-normal with a mean of 110 KB (sigma 0.6), fixed seed, so
// runs are reproducible. Two clusters: 100 equal nodes ("unweighted") and 50
// nodes of 1 TB + 50 of 2 TB ("weighted"); balance is reported as bytes per
// unit of weight, max/mean and min/mean. Prints a Markdown table.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "cluster/placement.h"

namespace {

using granary::cluster::Member;
using granary::cluster::Placement;
using granary::cluster::PlacementKey;

constexpr uint64_t kTB = 1ull << 40;
constexpr uint64_t kBlockSize = 4ull << 20;

struct Object {
  std::string placement_key;
  uint64_t size;
};

std::vector<Object> MakeObjects(size_t n) {
  std::mt19937_64 rng(20240601);
  const double sigma = 0.6;
  std::lognormal_distribution<double> size_dist(std::log(110e3) - sigma * sigma / 2, sigma);
  std::vector<Object> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t size = static_cast<uint64_t>(size_dist(rng)) + 1;
    std::string key =
        "train/n" + std::to_string(1440764 + i % 1000) + "/img_" + std::to_string(i) + ".JPEG";
    out.push_back({PlacementKey("imagenet", key, size, 0, kBlockSize), size});
  }
  return out;
}

std::vector<Member> MakeNodes(bool weighted) {
  std::vector<Member> nodes;
  for (int i = 0; i < 100; ++i) {
    std::string addr = "worker-" + std::to_string(i) + ".svc-worker:7070";
    nodes.push_back(
        Member{.node_id = addr, .address = addr, .capacity = weighted && i >= 50 ? 2 * kTB : kTB});
  }
  return nodes;
}

struct Row {
  const char* name;
  double max_over_mean = 0, min_over_mean = 0;
  size_t moved_leave = 0, ideal_leave = 0, moved_join = 0, ideal_join = 0;
  size_t stray = 0;  // moves not from the leaving node / not to the joining one (HRW: 0)
  double ns_per_lookup = 0;
};

// Owner index (into members()) of every object.
std::vector<uint32_t> Owners(const Placement& p, const std::vector<Object>& objects, double* ns) {
  std::unordered_map<const Member*, uint32_t> index;
  for (size_t i = 0; i < p.members().size(); ++i) index[&p.members()[i]] = static_cast<uint32_t>(i);
  std::vector<uint32_t> out;
  out.reserve(objects.size());
  const auto start = std::chrono::steady_clock::now();
  for (const Object& o : objects) out.push_back(index[p.Owner(o.placement_key)]);
  const auto took = std::chrono::steady_clock::now() - start;
  if (ns != nullptr) *ns = std::chrono::duration<double, std::nano>(took).count() / objects.size();
  return out;
}

// Objects whose owner differs between a and b; *stray counts the moves that
// neither left `changed` (the node that left) nor went to it (the node that joined).
size_t Moved(const Placement& a, const std::vector<uint32_t>& oa, const Placement& b,
             const std::vector<uint32_t>& ob, const std::string& changed, size_t* stray) {
  size_t moved = 0;
  for (size_t i = 0; i < oa.size(); ++i) {
    const std::string& from = a.members()[oa[i]].node_id;
    const std::string& to = b.members()[ob[i]].node_id;
    if (from == to) continue;
    ++moved;
    if (from != changed && to != changed) ++*stray;
  }
  return moved;
}

Row Simulate(const char* name, bool weighted, const std::vector<Object>& objects) {
  Row row{.name = name};
  std::vector<Member> nodes = MakeNodes(weighted);
  Placement base(nodes);
  const std::vector<uint32_t> owners = Owners(base, objects, &row.ns_per_lookup);
  std::vector<double> bytes(base.members().size());
  for (size_t i = 0; i < objects.size(); ++i) bytes[owners[i]] += objects[i].size;
  double total = 0, max = 0, min = 1e300;
  for (double b : bytes) total += b;
  const double total_weight = static_cast<double>(base.total_capacity());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double per_weight = bytes[i] / (base.members()[i].capacity / total_weight);
    max = std::max(max, per_weight);
    min = std::min(min, per_weight);
  }
  row.max_over_mean = max / total;
  row.min_over_mean = min / total;

  // One node leaves (a 2 TB one when weighted): ideal = the objects it owned.
  std::vector<Member> left = nodes;
  left.erase(left.end() - 1);
  Placement after_leave(left);
  row.moved_leave = Moved(base, owners, after_leave, Owners(after_leave, objects, nullptr),
                          nodes.back().node_id, &row.stray);
  row.ideal_leave =
      static_cast<size_t>(std::llround(objects.size() * nodes.back().capacity / total_weight));
  // One node joins with 1 TB: ideal = its fair share of the objects.
  std::vector<Member> joined = nodes;
  joined.push_back(
      Member{.node_id = "worker-new:7070", .address = "worker-new:7070", .capacity = kTB});
  Placement after_join(joined);
  row.moved_join = Moved(base, owners, after_join, Owners(after_join, objects, nullptr),
                         joined.back().node_id, &row.stray);
  row.ideal_join = static_cast<size_t>(std::llround(objects.size() * kTB / (total_weight + kTB)));
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'281'167;
  const std::vector<Object> objects = MakeObjects(n);
  double total_bytes = 0;
  for (const Object& o : objects) total_bytes += o.size;
  std::printf("placement_sim: %zu objects, %.1f GB (mean %.1f KB), 100 nodes\n\n", n,
              total_bytes / 1e9, total_bytes / n / 1e3);
  std::printf(
      "| cluster | max/mean bytes per weight | min/mean | moved on leave (ideal) | "
      "moved on join (ideal) | other moves | ns per Owner() |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Row& r : {Simulate("100 x 1 TB (unweighted)", false, objects),
                       Simulate("50 x 1 TB + 50 x 2 TB (weighted)", true, objects)}) {
    std::printf("| %s | %.4f | %.4f | %zu (%zu, %+.1f%%) | %zu (%zu, %+.1f%%) | %zu | %.0f |\n",
                r.name, r.max_over_mean, r.min_over_mean, r.moved_leave, r.ideal_leave,
                100.0 * (double(r.moved_leave) - r.ideal_leave) / r.ideal_leave, r.moved_join,
                r.ideal_join, 100.0 * (double(r.moved_join) - r.ideal_join) / r.ideal_join, r.stray,
                r.ns_per_lookup);
  }
  std::printf(
      "\nideal: the leaving node's / the joining node's fair share of the objects; "
      "other moves: objects that moved between two unchanged nodes (0 for HRW)\n");
  return 0;
}
