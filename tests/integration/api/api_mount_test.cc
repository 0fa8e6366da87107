// The native client attached to a live mount: `granary mount` of a posix tree,
// then Client::Attach to the mount point (and to a directory inside it) while
// FUSE readers read the same files. Every byte equals the source, cold files
// are fetched once for both paths (the daemon's origin counters), `granary
// status` counts the API's reads, and a path outside any mount is refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_runner.h"
#include "daemon/daemon.h"
#include "fuse/fuse_server.h"
#include "granary/client.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::RunGranary;
using testing::TempDir;

bool ReadFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) {
      ::close(fd);
      return n == 0;
    }
    out->append(buf, static_cast<size_t>(n));
  }
}

class ApiMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0)
      GTEST_SKIP() << "needs root and /dev/fuse";
    for (int i = 0; i < 300; ++i) {
      std::string rel = "train/c" + std::to_string(i % 7) + "/img" + std::to_string(i) + ".jpg";
      tree_[rel] = testing::RandomBytes(500 + (i * 7919) % 60000, i);
    }
    tree_["big.bin"] = testing::RandomBytes(3 * (1 << 20) + 777, 5);
    for (const auto& [rel, data] : tree_) src_.Write(rel, data);
    mp_ = work_.path() + "/mnt";
    fs::create_directories(mp_);
    ProcessResult r =
        RunGranary({"mount", src_.path(), mp_, "--cache-dir", work_.path() + "/cache:1G",
                    "--block-size", "1MiB", "--run-dir", RunDir(), "--fuse-threads", "4"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    mounted_ = true;
  }
  void TearDown() override {
    if (!mounted_) return;
    RunGranary({"umount", "--run-dir", RunDir(), mp_});
    if (IsMountpoint(mp_)) UnmountFuse(mp_).IgnoreError();
  }
  std::string RunDir() const { return work_.path() + "/run"; }
  nlohmann::json Status() {
    ProcessResult r = RunGranary({"status", mp_, "--json", "--run-dir", RunDir()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_array() && !j.empty() ? j[0] : j;
  }

  TempDir src_, work_;
  std::string mp_;
  bool mounted_ = false;
  std::map<std::string, std::string> tree_;
};

TEST_F(ApiMountTest, AttachedReadsEqualTheSourceWhileFuseReadersReadTheSameFiles) {
  AttachOptions ao;
  ao.run_dir = RunDir();
  auto c = Client::Attach(mp_, ao);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Info().attached);
  EXPECT_EQ((*c)->Info().files, tree_.size());

  // Four API threads and four FUSE readers over the same cold files.
  std::atomic<int> api_bad{0}, fuse_bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      int i = 0;
      for (const auto& [rel, data] : tree_) {
        if (i++ % 4 != t) continue;
        auto got = (*c)->ReadWhole(rel);
        if (!got.ok() || *got != data) ++api_bad;
      }
    });
    ts.emplace_back([&, t] {
      int i = 0;
      for (auto it = tree_.rbegin(); it != tree_.rend(); ++it) {
        if (i++ % 4 != t) continue;
        std::string got;
        if (!ReadFile(mp_ + "/" + it->first, &got) || got != it->second) ++fuse_bad;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(api_bad.load(), 0);
  EXPECT_EQ(fuse_bad.load(), 0);

  // Each object left the origin once for both paths.
  nlohmann::json st = Status();
  EXPECT_EQ(st["cached_files"].get<uint64_t>(), tree_.size()) << st.dump();
  EXPECT_EQ(st["origin_requests"].get<uint64_t>(), tree_.size() + 3)
      << st.dump();  // big.bin: 4 blocks

  // Attached to a directory inside the mount: paths are relative to it.
  auto sub = Client::Attach(mp_ + "/train/c3", ao);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  auto list = (*sub)->List("");
  ASSERT_TRUE(list.ok());
  size_t in_c3 = 0;
  for (const auto& [rel, data] : tree_) in_c3 += rel.starts_with("train/c3/");
  EXPECT_EQ(list->size(), in_c3);
  for (const FileInfo& f : *list) {
    auto got = (*sub)->ReadWhole(f.path);
    ASSERT_TRUE(got.ok()) << f.path;
    EXPECT_EQ(*got, tree_["train/c3/" + f.path]);
  }

  auto load = (*c)->Load("");
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->files_cached, tree_.size());

  EXPECT_EQ((*c)->ReadWhole("train/none.jpg").status().code(), Code::kNotFound);
  EXPECT_FALSE(Client::Attach(work_.path(), ao).ok());  // not a mount
}

}  // namespace
}  // namespace granary
