// TempDir: a fresh private directory for one test, removed with everything
// under it when the TempDir goes. The one temporary directory of the tests.
//
// Thread safety: construct and destroy on one thread; path() from any.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace granary::testing {

class TempDir {
 public:
  enum class Where {
    kTmp,      // $TMPDIR, else /tmp
    kFastest,  // /dev/shm when writable, else as kTmp
    kOnDisk,   // $TMPDIR, else /var/tmp (a real disk: O_DIRECT, ext4 flags)
  };
  explicit TempDir(Where where = Where::kTmp, std::string_view prefix = "granary") {
    const char* env = std::getenv("TMPDIR");
    std::string base = env && *env ? env : where == Where::kOnDisk ? "/var/tmp" : "/tmp";
    if (where == Where::kFastest && ::access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    std::string tmpl = base + "/" + std::string(prefix) + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();  // no test can run without it
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/rel.
  std::string File(const std::string& rel) const { return path_ + "/" + rel; }
  // Writes `data` to path()/rel, creating parent directories.
  void Write(const std::string& rel, std::string_view data) const {
    const std::filesystem::path p = std::filesystem::path(path_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }

 private:
  std::string path_;
};

}  // namespace granary::testing
