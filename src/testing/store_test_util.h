// Helpers shared by the store's tests: temporary directories, test data,
// a one-tier store's options, object keys, and whole-object reads.
// Thread safety: TempDir is not shared between threads; MakeData is pure.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "store/store.h"
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

// A store of one SSD tier at `path` (1 MiB blocks, no background thread).
inline StoreOptions OneTier(const std::string& path, uint64_t quota, std::string policy = "lru") {
  return StoreOptions{
      .tiers = {TierLevel{
          .medium = Medium::kSsd, .path = path, .quota = quota, .high = 0.9, .low = 0.5}},
      .policy = std::move(policy),
      .block_size = 1 << 20,
      .background = false};
}

// Object `i` of dataset "ds" (etag "v1").
inline ObjectKey Key(int i, uint64_t size) {
  return ObjectKey{.dataset = "ds", .key = "obj/" + std::to_string(i), .etag = "v1", .size = size};
}

// The whole object, or "<error>" when the read fails.
inline std::string ReadAll(Store& store, const ObjectKey& key) {
  std::string buf(key.size, '\0');
  auto n = store.Read(key, 0, std::span(buf));
  if (!n.ok()) return "<" + n.status().ToString() + ">";
  buf.resize(*n);
  return buf;
}

}  // namespace granary::testing_util
