// Helpers shared by the store's tests: temporary directories and test data.
// Thread safety: TempDir is not shared between threads; MakeData is pure.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "testing/temp_dir.h"

namespace granary::testing_util {

// A fresh directory, removed with everything in it. Under /dev/shm when it is
// usable (fsync is free there, which keeps restart-heavy tests fast), else
// under $TMPDIR or /tmp; with kOnDisk under $TMPDIR or /var/tmp, for a test
// of what only a disk file system does (O_DIRECT, the page cache).
class TempDir : public ::granary::testing::TempDir {
 public:
  explicit TempDir(Where where = Where::kFastest)
      : ::granary::testing::TempDir(where, "granary-store") {}
};

// `size` pseudo-random bytes determined by `seed`.
inline std::string MakeData(size_t size, uint64_t seed) {
  std::string out(size, '\0');
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < size; ++j) out[i + j] = static_cast<char>(v >> (8 * j));
  }
  return out;
}

}  // namespace granary::testing_util
