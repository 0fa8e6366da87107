// Helpers shared by the store's tests: temporary directories and test data.
// Thread safety: TempDir is not shared between threads; MakeData is pure.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace granary::testing_util {

// A fresh directory, removed with everything in it. Under /dev/shm when it is
// usable (fsync is free there, which keeps restart-heavy tests fast), else
// under $TMPDIR or /tmp; with kOnDisk under $TMPDIR or /var/tmp, for a test
// of what only a disk file system does (O_DIRECT, the page cache).
class TempDir {
 public:
  enum class Where {
    kFastest,  // /dev/shm when usable
    kOnDisk,   // $TMPDIR or /var/tmp
  };
  explicit TempDir(Where where = Where::kFastest) {
    const char* env = std::getenv("TMPDIR");
    const char* fallback = where == Where::kOnDisk ? "/var/tmp" : "/tmp";
    std::string base = where == Where::kFastest && ::access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : env && *env                                               ? env
                                                                                   : fallback;
    std::string tmpl = base + "/granary-store-XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
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
