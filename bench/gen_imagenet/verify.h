// VerifyDataset: checks a generated (or real) ImageNet-style tree in the
// PaddleClas layout — what `gen_imagenet --verify DIR` runs and the smoke tests
// rely on.
//
// Checks: train_list.txt parses ("train/<wnid>/<name>.JPEG <label>"), labels
// are 0..classes-1 in sorted-wnid order and consistent per folder, every listed
// file exists, the tree under train/ holds exactly the listed files, sampled
// files decode with libjpeg-turbo, and no two files have the same bytes.
//
// Thread safety: a free function; runs on the calling thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gen_imagenet/size_stats.h"
#include "granary/status.h"

namespace granary::bench {

struct VerifyReport {
  SizeSummary sizes;                  // over the listed files
  uint64_t classes = 0;               // distinct folders in the list
  uint64_t decoded = 0;               // files fully decoded
  uint64_t duplicates = 0;            // files whose bytes equal an earlier file's
  std::vector<std::string> problems;  // one line each; empty = valid
};

// Verifies `root`. `decode_every` = 1 decodes every file, k decodes every k-th.
// Returns an error only when the tree cannot be read at all; content problems
// land in VerifyReport::problems.
Result<VerifyReport> VerifyDataset(const std::string& root, uint64_t decode_every = 1);

}  // namespace granary::bench
