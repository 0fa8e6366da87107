// Large objects through a real mount over a real S3-compatible server
// (moto_server): shards many blocks long read whole with read(2) in 256 KiB
// pieces, through mmap (as DALI reads TFRecords) and with O_DIRECT, by
// several readers at once; every byte must equal the object, each block must
// leave the origin once (origin bytes = object bytes), every shard read must
// be completely cached afterwards, and a warm remount reads nothing from the
// origin. A directory marker (a zero-byte "valid/" object, as DLIO and the S3
// console create) shows as an empty directory.
//
// Needs root and /dev/fuse (skipped otherwise). The multi-GB version of these
// reads is bench/large_read (--big-mib, --mmap, --direct verify every byte).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cli_runner.h"
#include "daemon/daemon.h"
#include "fuse/fuse_server.h"
#include "moto_bucket.h"
#include "testing/random_bytes.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::RunGranary;
using testing::TempDir;

constexpr uint64_t kShard = 24ull << 20;  // 24 blocks of 1 MiB
constexpr int kShards = 4;

// How a shard is read.
enum class How { kRead, kMmap, kDirect };

// The whole file at `path`, read as `how` says; empty string and errno on failure.
bool ReadAs(const std::string& path, How how, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (how == How::kDirect ? O_DIRECT : 0));
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return false;
  }
  const auto size = static_cast<size_t>(st.st_size);
  out->assign(size, '\0');
  bool ok = true;
  if (how == How::kMmap) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ok = p != MAP_FAILED;
    if (ok) {
      std::memcpy(out->data(), p, size);
      ::munmap(p, size);
    }
  } else {
    // 256 KiB pieces (DLIO's, and O_DIRECT wants an aligned buffer).
    constexpr size_t kPiece = 256 << 10;
    void* buf = nullptr;
    ok = ::posix_memalign(&buf, 4096, kPiece) == 0;
    for (size_t at = 0; ok && at < size;) {
      const ssize_t n = ::read(fd, buf, kPiece);
      if (n <= 0) {
        ok = false;
        break;
      }
      std::memcpy(out->data() + at, buf, static_cast<size_t>(n));
      at += static_cast<size_t>(n);
    }
    std::free(buf);
  }
  ::close(fd);
  return ok;
}

class LargeObjectMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    auto bucket = testing::StartMotoBucket("bucket");
    ASSERT_TRUE(bucket.ok()) << bucket.status().ToString();
    moto_ = std::move(bucket->server);
    S3Ufs* s3 = bucket->s3;
    for (int i = 0; i < kShards; ++i) {
      const std::string rel = "train/shard-" + std::to_string(i) + ".tar";
      // Odd shards end inside a block: the last block is short.
      shards_[rel] = testing::RandomBytes(kShard + (i % 2 == 1 ? 12345 : 0), 300 + i);
      ASSERT_TRUE(s3->PutObject("ds/" + rel, shards_[rel]).ok()) << rel;
    }
    ASSERT_TRUE(s3->PutObject("ds/valid/", "").ok());
    mp_ = work_.path() + "/mnt";
    fs::create_directories(mp_);
  }
  void TearDown() override {
    if (!mp_.empty() && IsMountpoint(mp_)) {
      RunGranary({"umount", "--run-dir", RunDir(), mp_});
      if (IsMountpoint(mp_)) UnmountFuse(mp_).IgnoreError();
    }
    moto_.reset();
  }
  std::string RunDir() const { return work_.path() + "/run"; }

  void MustMount(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"mount",
                                     "s3://bucket/ds",
                                     mp_,
                                     "--endpoint",
                                     moto_->endpoint(),
                                     "--cache-dir",
                                     work_.path() + "/cache:1G",
                                     "--block-size",
                                     "1MiB",
                                     "--run-dir",
                                     RunDir(),
                                     "--fuse-threads",
                                     "4"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ProcessResult r = RunGranary(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(IsMountpoint(mp_));
  }
  nlohmann::json UmountStats() {
    ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::ifstream in(RunFilePath(RunDir(), mp_, "stats.json"));
    if (!in) return nlohmann::json::object();
    return nlohmann::json::parse(in, nullptr, false);
  }
  // Reads every shard as `how` says, one reader thread per shard; returns
  // the names of the shards whose bytes differ (or could not be read).
  std::vector<std::string> ReadAllShards(How how) {
    std::map<std::string, bool> ok;
    for (const auto& [rel, data] : shards_) ok[rel] = false;
    std::vector<std::thread> readers;
    for (auto& [rel, good] : ok) {
      readers.emplace_back([this, how, rel = rel, good = &good] {
        std::string got;
        *good = ReadAs(mp_ + "/" + rel, how, &got) && got == shards_.at(rel);
      });
    }
    for (auto& t : readers) t.join();
    std::vector<std::string> bad;
    for (const auto& [rel, good] : ok) {
      if (!good) bad.push_back(rel);
    }
    return bad;
  }
  uint64_t TotalBytes() const {
    uint64_t n = 0;
    for (const auto& [rel, data] : shards_) n += data.size();
    return n;
  }

  std::unique_ptr<testing::MotoServer> moto_;
  std::map<std::string, std::string> shards_;
  TempDir work_;
  std::string mp_;
};

TEST_F(LargeObjectMountTest, ShardsStreamByteExactOnceFromTheOriginAndStayCached) {
  MustMount();
  // The directory marker is an empty directory beside train/.
  struct stat st {};
  ASSERT_EQ(::stat((mp_ + "/valid").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(fs::is_empty(mp_ + "/valid"));

  // Cold: four readers at once, each streaming its own shard.
  EXPECT_EQ(ReadAllShards(How::kRead), std::vector<std::string>{});
  nlohmann::json cold = UmountStats();
  ASSERT_TRUE(cold.contains("engine")) << cold.dump();
  // Each block left the origin once, and every shard is completely cached.
  EXPECT_EQ(cold["engine"]["origin_bytes"].get<uint64_t>(), TotalBytes()) << cold["engine"].dump();
  EXPECT_EQ(cold["store"]["complete_objects"].get<uint64_t>(), static_cast<uint64_t>(kShards))
      << cold["store"].dump();
  EXPECT_EQ(cold["engine"]["not_admitted"].get<uint64_t>(), 0u);

  // Warm, over a fresh mount: mmap and O_DIRECT readers, nothing from the origin.
  MustMount();
  EXPECT_EQ(ReadAllShards(How::kMmap), std::vector<std::string>{});
  EXPECT_EQ(ReadAllShards(How::kDirect), std::vector<std::string>{});
  nlohmann::json warm = UmountStats();
  EXPECT_EQ(warm["engine"]["origin_requests"].get<uint64_t>(), 0u) << warm["engine"].dump();
}

// Passthrough over more data than --auto-cached-max (the case auto picks it
// for): a file not yet completely cached streams as in a cached mount, its
// blocks pushed into the mount's page cache ahead of the reader; then the
// complete files are read through passthrough.
TEST_F(LargeObjectMountTest, PassthroughOverMoreThanMemoryStreamsColdShardsThenPassesThrough) {
  MustMount({"--read-mode", "passthrough", "--auto-cached-max", "16MiB"});
  EXPECT_EQ(ReadAllShards(How::kRead), std::vector<std::string>{});
  nlohmann::json cold = UmountStats();
  EXPECT_EQ(cold["engine"]["origin_bytes"].get<uint64_t>(), TotalBytes()) << cold["engine"].dump();
  EXPECT_EQ(cold["store"]["complete_objects"].get<uint64_t>(), static_cast<uint64_t>(kShards))
      << cold["store"].dump();
  EXPECT_EQ(cold["fuse"]["read_mode"], "passthrough") << cold["fuse"].dump();
  EXPECT_GT(cold["fuse"]["store_bytes"].get<uint64_t>(), 0u) << cold["fuse"].dump();
  MustMount({"--read-mode", "passthrough", "--auto-cached-max", "16MiB"});
  EXPECT_EQ(ReadAllShards(How::kMmap), std::vector<std::string>{});
  nlohmann::json warm = UmountStats();
  EXPECT_EQ(warm["engine"]["origin_requests"].get<uint64_t>(), 0u) << warm["engine"].dump();
}

TEST_F(LargeObjectMountTest, ColdMmapAndDirectReadersAreByteExact) {
  MustMount();
  EXPECT_EQ(ReadAllShards(How::kMmap), std::vector<std::string>{});
  nlohmann::json first = UmountStats();
  EXPECT_EQ(first["engine"]["origin_bytes"].get<uint64_t>(), TotalBytes())
      << first["engine"].dump();
  // A new cache: O_DIRECT readers of cold shards.
  fs::remove_all(work_.path() + "/cache");
  MustMount();
  EXPECT_EQ(ReadAllShards(How::kDirect), std::vector<std::string>{});
  nlohmann::json second = UmountStats();
  EXPECT_EQ(second["engine"]["origin_bytes"].get<uint64_t>(), TotalBytes())
      << second["engine"].dump();
}

}  // namespace
}  // namespace granary
