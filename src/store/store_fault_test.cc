// Fault tests of the store: a writer process killed with SIGKILL at random
// points, and a full disk (a 2 MiB tmpfs, when running as root).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "store/store.h"
#include "testing/store_test_util.h"

namespace granary {
namespace {

using testing_util::MakeData;
using testing_util::TempDir;

constexpr uint64_t kBlock = 64 * 1024;
constexpr int kKeys = 150;

ObjectKey CrashKey(int j) {
  uint64_t size = j % 5 == 0 ? 3 * kBlock + 1234 : 1000 + (j * 7919) % 60'000;
  return ObjectKey{
      .dataset = "crash", .key = "obj/" + std::to_string(j), .etag = "e", .size = size};
}

uint64_t TmpFilesUnder(const std::string& root) {
  uint64_t n = 0;
  for (auto& f : std::filesystem::recursive_directory_iterator(root)) {
    if (f.path().filename().string().find(".tmp") != std::string::npos) ++n;
  }
  return n;
}

// The child: admits, removes and re-admits objects forever, writing one byte
// to `progress` after each operation. Never returns.
[[noreturn]] void CrashChild(const StoreOptions& opt, int progress, uint64_t seed) {
  auto opened = Store::Open(opt);
  if (!opened.ok()) ::_exit(2);
  Store& store = **opened;
  std::mt19937_64 rng(seed);
  for (int op = 0; op < 1'000'000; ++op) {
    int j = static_cast<int>(rng() % kKeys);
    ObjectKey key = CrashKey(j);
    std::string data = MakeData(key.size, j);
    int what = static_cast<int>(rng() % 10);
    if (what < 6) {
      (void)store.AdmitObject(key, data);
    } else if (what < 9) {
      uint64_t b = key.size > kBlock ? rng() % ((key.size + kBlock - 1) / kBlock) : 0;
      (void)store.AdmitBlock(key, b, std::string_view(data).substr(b * kBlock, kBlock));
    } else {
      (void)store.Remove(key);
    }
    char c = 1;
    if (::write(progress, &c, 1) != 1) ::_exit(3);
  }
  ::_exit(0);
}

// Every block the reopened store claims is byte-exact. Returns blocks served.
uint64_t CheckServedData(Store& store) {
  uint64_t served = 0;
  for (int j = 0; j < kKeys; ++j) {
    ObjectKey key = CrashKey(j);
    std::string data = MakeData(key.size, j);
    for (uint64_t off = 0; off < key.size; off += kBlock) {
      if (!store.ContainsRange(key, off, 1)) continue;
      std::string buf(std::min(kBlock, key.size - off), '\0');
      auto n = store.Read(key, off, std::span(buf));
      EXPECT_TRUE(n.ok()) << key.key << " @" << off << ": " << n.status().ToString();
      if (!n.ok()) continue;
      EXPECT_EQ(buf, data.substr(off, buf.size())) << key.key << " @" << off;
      ++served;
    }
    auto fd = store.OpenCompleteFile(key);
    EXPECT_EQ(fd.ok(), store.Contains(key)) << key.key;
    if (fd.ok()) {
      std::string whole(key.size, '\0');
      EXPECT_EQ(::pread(*fd, whole.data(), whole.size(), 0), static_cast<ssize_t>(key.size));
      EXPECT_EQ(whole, data) << key.key;
      ::close(*fd);
    }
  }
  return served;
}

TEST(StoreCrashTest, KilledWriterLeavesOnlyExactData) {
  TempDir dir;
  StoreOptions opt{.tiers = {TierLevel{.medium = Medium::kMem,
                                       .path = dir.path() + "/mem",
                                       .quota = 1 << 20,
                                       .high = 0.8,
                                       .low = 0.5},
                             TierLevel{.medium = Medium::kSsd,
                                       .path = dir.path() + "/ssd",
                                       .quota = 3 << 20,
                                       .high = 0.8,
                                       .low = 0.5}},
                   .block_size = kBlock,
                   .background = true,
                   .eviction_interval = std::chrono::milliseconds(2),
                   .checkpoint_every_records = 40,
                   .index_shards = 8};
  std::mt19937_64 rng(42);
  uint64_t served_total = 0;
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      CrashChild(opt, fds[1], rng() + round);
    }
    ::close(fds[1]);
    // Let the child run a random number of operations, then kill it mid-way.
    uint64_t want = 20 + rng() % 400, got = 0;
    char buf[64];
    while (got < want) {
      ssize_t n = ::read(fds[0], buf, std::min<uint64_t>(sizeof(buf), want - got));
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(fds[0]);
    ASSERT_EQ(got, want) << "the writer died early, status " << status;

    StoreOptions check = opt;
    check.background = false;
    auto opened = Store::Open(check);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_EQ(TmpFilesUnder(dir.path()), 0u);
    served_total += CheckServedData(**opened);
    EXPECT_EQ((*opened)->stats().checksum_failures, 0u);
  }
  std::printf("crash test: %llu blocks served byte-exact after 8 kills\n",
              static_cast<unsigned long long>(served_total));
  EXPECT_GT(served_total, 0u);
}

// Unmounts (lazily) on scope exit, also when an assertion fails.
struct ScopedMount {
  std::string path;
  ~ScopedMount() {
    if (!path.empty()) ::umount2(path.c_str(), MNT_DETACH);
  }
};

TEST(StoreEnospcTest, FullDiskSkipsAdmissionNeverFailsOrCorrupts) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a 2 MiB tmpfs for a full disk";
  TempDir dir;
  std::string mnt = dir.path() + "/small";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=2m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs at " << mnt << ": " << std::strerror(errno);
  }
  ScopedMount unmount{mnt};
  StoreOptions opt{.tiers = {TierLevel{.medium = Medium::kSsd, .path = mnt, .quota = 64 << 20}},
                   .block_size = 1 << 20,
                   .background = false};
  auto key = [](int i) {
    return ObjectKey{.dataset = "full", .key = std::to_string(i), .etag = "e", .size = 60'000};
  };
  {
    auto opened = Store::Open(opt);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    Store& store = **opened;
    int admitted = 0, skipped = 0;
    for (int i = 0; i < 60; ++i) {
      auto r = store.AdmitObject(key(i), MakeData(60'000, i));
      ASSERT_TRUE(r.ok()) << "object " << i << ": " << r.status().ToString();
      (*r ? admitted : skipped)++;
    }
    std::printf("enospc test: %d admitted, %d skipped on a full 2 MiB tmpfs\n", admitted, skipped);
    EXPECT_GT(admitted, 10);
    EXPECT_GT(skipped, 0);
    EXPECT_GT(store.stats().no_space, 0u);
    ObjectKey big{.dataset = "full", .key = "big", .etag = "e", .size = 5 << 20};
    auto r = store.AdmitObject(big, MakeData(big.size, 99));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(*r);
    EXPECT_EQ(TmpFilesUnder(mnt), 0u);
    for (int i = 0; i < 60; ++i) {
      std::string buf(60'000, '\0');
      auto n = store.Read(key(i), 0, std::span(buf));
      if (n.ok()) {
        EXPECT_EQ(buf, MakeData(60'000, i)) << i;
      }
    }
    // The eviction pass frees room after the ENOSPC, so admissions resume.
    store.RunEvictionOnce();
    EXPECT_GT(store.stats().evictions, 0u);
    auto again = store.AdmitObject(key(1000), MakeData(60'000, 1000));
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(*again);
  }
  auto reopened = Store::Open(opt);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  int served = 0;
  for (int i : {0, 1, 2, 10, 20, 30, 40, 50, 59, 1000}) {
    std::string buf(60'000, '\0');
    auto n = (*reopened)->Read(key(i), 0, std::span(buf));
    if (!n.ok()) continue;
    EXPECT_EQ(buf, MakeData(60'000, i)) << i;
    ++served;
  }
  EXPECT_GT(served, 0);
  EXPECT_EQ((*reopened)->stats().checksum_failures, 0u);
}

}  // namespace
}  // namespace granary
