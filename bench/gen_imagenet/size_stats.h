// SizeSummary: count, total, mean, median, p99 and max of a set of file sizes,
// the numbers gen_imagenet and its --verify mode print.
// Thread safety: pure function over a value.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace granary::bench {

struct SizeSummary {
  uint64_t count = 0;
  uint64_t total_bytes = 0;
  double mean_bytes = 0;
  uint64_t median_bytes = 0;
  uint64_t p99_bytes = 0;
  uint64_t max_bytes = 0;
};

// Summarizes `sizes` (taken by value: it is sorted).
inline SizeSummary Summarize(std::vector<uint64_t> sizes) {
  SizeSummary s;
  if (sizes.empty()) return s;
  std::sort(sizes.begin(), sizes.end());
  s.count = sizes.size();
  s.total_bytes = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  s.mean_bytes = static_cast<double>(s.total_bytes) / static_cast<double>(s.count);
  s.median_bytes = sizes[sizes.size() / 2];
  s.p99_bytes = sizes[std::min(sizes.size() - 1, sizes.size() * 99 / 100)];
  s.max_bytes = sizes.back();
  return s;
}

}  // namespace granary::bench
