#include "gen_imagenet/dataset_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace granary::bench {

constexpr uint64_t kMaxCount = 1'281'167;  // ImageNet-1k train

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) {
    seed = Mix64(seed);
    s = seed;
  }
}

uint64_t Rng::Next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double Rng::Normal() {
  double u1 = std::max(Uniform(), 1e-300);
  double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Result<DatasetPlan> DatasetPlan::Create(PlanOptions options) {
  if (options.count < 1 || options.count > kMaxCount) {
    return InvalidArgument("--count " + std::to_string(options.count) + ": must be in 1.." +
                           std::to_string(kMaxCount));
  }
  if (options.classes == 0) {
    options.classes = static_cast<uint32_t>(std::min<uint64_t>(1000, options.count));
  }
  if (options.classes > options.count || options.classes > 100'000) {
    return InvalidArgument("--classes " + std::to_string(options.classes) +
                           ": must be <= --count and <= 100000");
  }
  if (!(options.median_bytes >= 1024) || !(options.sigma >= 0 && options.sigma <= 3) ||
      !(options.tail_fraction >= 0 && options.tail_fraction <= 1) ||
      !(options.tail_min_bytes > 0 && options.tail_max_bytes >= options.tail_min_bytes)) {
    return InvalidArgument("size model: need median >= 1 KiB, sigma in [0,3], tail in [0,1]");
  }
  DatasetPlan plan(options);
  std::set<uint32_t> ids;
  Rng rng(Mix64(options.seed ^ 0x77a1d5ull));
  while (ids.size() < options.classes) {
    ids.insert(1'000'000 + static_cast<uint32_t>(rng.Next() % 15'000'000));
  }
  for (uint32_t id : ids) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "n%08u", id);
    plan.wnids_.emplace_back(buf);
  }
  return plan;
}

uint64_t DatasetPlan::FirstOfClass(uint32_t label) const {
  // Smallest i with floor(i*C/N) >= label, i.e. ceil(label*N/C).
  uint64_t n = options_.count, c = classes();
  return (static_cast<uint64_t>(label) * n + c - 1) / c;
}

uint32_t DatasetPlan::TargetBytes(uint64_t file_seed) const {
  Rng rng(file_seed ^ 0x51e5ull);
  double bytes;
  if (rng.Uniform() < options_.tail_fraction) {
    double lo = std::log(options_.tail_min_bytes), hi = std::log(options_.tail_max_bytes);
    bytes = std::exp(lo + (hi - lo) * rng.Uniform());
  } else {
    bytes = options_.median_bytes * std::exp(options_.sigma * rng.Normal());
    bytes = std::clamp(bytes, static_cast<double>(options_.min_bytes), options_.tail_max_bytes);
  }
  return static_cast<uint32_t>(bytes);
}

FileSpec DatasetPlan::File(uint64_t index) const {
  FileSpec f;
  f.index = index;
  f.label = static_cast<uint32_t>(index * classes() / options_.count);
  f.in_class = static_cast<uint32_t>(index - FirstOfClass(f.label));
  f.file_seed = Mix64(options_.seed ^ Mix64(index + 0x1234567ull));
  f.target_bytes = TargetBytes(f.file_seed);
  const std::string& wnid = wnids_[f.label];
  f.rel_path = "train/" + wnid + "/" + wnid + "_" + std::to_string(f.in_class) + ".JPEG";
  return f;
}

}  // namespace granary::bench
