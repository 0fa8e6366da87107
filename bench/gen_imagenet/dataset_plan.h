// DatasetPlan: what an ImageNet-like data set generated from a seed contains —
// class folders, file names, labels and each file's target size and pixel
// dimensions — as pure functions of (options, file index).
//
// Layout (PaddleClas): train/<wnid>/<wnid>_<j>.JPEG plus train_list.txt lines
// "train/<wnid>/<wnid>_<j>.JPEG <label>". Class ids look like WordNet ids
// ('n' + 8 digits), are distinct, sorted, and the label of a class is its rank
// in that order (what torchvision's ImageFolder assigns too). File i belongs to
// class i*classes/count; files are spread evenly (class sizes differ by <= 1).
//
// Sizes follow ImageNet's train set: a lognormal body (median ~96 KB, sigma 0.5)
// plus a 0.2% tail log-uniform in [600 KB, 4 MB], giving mean ~110 KB, median
// ~95 KB, p99 ~330 KB and a few multi-MB files per 10k.
//
// Invariant: every function here is deterministic in (options, index) — no
// global state — so any thread may generate any file in any order.
// Thread safety: DatasetPlan is immutable after construction; share freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "granary/status.h"

namespace granary::bench {

// SplitMix64 step: a well-mixed 64-bit hash of x.
uint64_t Mix64(uint64_t x);

// A small, fast, seedable PRNG (xoshiro256**).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1).
  double Uniform();
  // Standard normal (Box-Muller).
  double Normal();

 private:
  uint64_t s_[4];
};

struct PlanOptions {
  uint64_t count = 1000;            // files to generate (1 .. 1,281,167)
  uint32_t classes = 0;             // class folders; 0 = min(1000, count)
  uint64_t seed = 1;                // everything derives from it
  double median_bytes = 96'000;     // median of the lognormal body
  double sigma = 0.5;               // sigma of the lognormal body (log space)
  double tail_fraction = 0.002;     // share of files drawn from the heavy tail
  double tail_min_bytes = 600'000;  // heavy tail: log-uniform in [min, max]
  double tail_max_bytes = 4'000'000;
  uint32_t min_bytes = 4'096;  // clamp of the body
};

// One file of the plan.
struct FileSpec {
  uint64_t index = 0;         // 0 .. count-1
  uint32_t label = 0;         // class rank
  uint32_t in_class = 0;      // j in <wnid>_<j>.JPEG
  uint64_t file_seed = 0;     // seeds this file's pixels
  uint32_t target_bytes = 0;  // size the encoder aims for
  std::string rel_path;       // "train/<wnid>/<wnid>_<j>.JPEG"
};

class DatasetPlan {
 public:
  // Validates options (count range, classes <= count, positive sizes).
  static Result<DatasetPlan> Create(PlanOptions options);

  const PlanOptions& options() const { return options_; }
  uint64_t count() const { return options_.count; }
  uint32_t classes() const { return static_cast<uint32_t>(wnids_.size()); }
  // Sorted WordNet-like ids; label = position.
  const std::vector<std::string>& wnids() const { return wnids_; }

  FileSpec File(uint64_t index) const;
  // Index of the first file of class `label` (classes are contiguous ranges).
  uint64_t FirstOfClass(uint32_t label) const;

 private:
  explicit DatasetPlan(PlanOptions options) : options_(options) {}
  uint32_t TargetBytes(uint64_t file_seed) const;

  PlanOptions options_;
  std::vector<std::string> wnids_;
};

}  // namespace granary::bench
