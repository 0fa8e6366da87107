// Unit tests of the store: admission, reads, restart, tiers, eviction.
#include "store/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "common/block_buffer.h"
#include "store/index_format.h"
#include "testing/epoch_sim.h"
#include "testing/store_test_util.h"

namespace granary {
namespace {

using testing_util::Key;
using testing_util::MakeData;
using testing_util::OneTier;
using testing_util::ReadAll;
using testing_util::TempDir;

TEST(StoreTest, AdmitReadRestart) {
  TempDir dir;
  StoreOptions opt{.tiers = {TierLevel{
                       .medium = Medium::kSsd, .path = dir.path() + "/ssd", .quota = 64ull << 20}},
                   .block_size = 1 << 20,
                   .background = false};
  std::string small = MakeData(110'000, 1);
  std::string large = MakeData(3'500'000, 2);
  ObjectKey ks{.dataset = "d", .key = "a.jpg", .etag = "e1", .size = small.size()};
  ObjectKey kl{.dataset = "d", .key = "big.bin", .etag = "e1", .size = large.size()};
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_FALSE((*store)->Contains(ks));
    std::string buf(200'000, '\0');
    EXPECT_EQ((*store)->Read(ks, 0, std::span(buf)).status().code(), Code::kNotFound);
    ASSERT_TRUE((*store)->AdmitObject(ks, small).value());
    ASSERT_TRUE(
        (*store)->AdmitBlock(kl, 1, std::string_view(large).substr(1 << 20, 1 << 20)).value());
    EXPECT_FALSE((*store)->Contains(kl));
    EXPECT_TRUE((*store)->ContainsRange(kl, (1 << 20) + 5, 1000));
    EXPECT_FALSE((*store)->ContainsRange(kl, (1 << 20) - 5, 1000));
    auto n = (*store)->Read(ks, 0, std::span(buf));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, small.size());
    EXPECT_EQ(buf.substr(0, *n), small);
    auto st = (*store)->stats();
    EXPECT_EQ(st.tiers[0].files, 2u);
    EXPECT_EQ(st.tiers[0].used_bytes, 110'000u / 4096 * 4096 + 4096 + (1u << 20));
  }
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->Contains(ks));
  EXPECT_TRUE((*store)->ContainsRange(kl, (1 << 20), 1 << 20));
  std::string buf(1000, '\0');
  auto n = (*store)->Read(kl, (1 << 20) + 77, std::span(buf));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(buf, large.substr((1 << 20) + 77, 1000));
  ASSERT_TRUE((*store)->AdmitObject(kl, large).value());
  EXPECT_TRUE((*store)->Contains(kl));
  auto fd = (*store)->OpenCompleteFile(kl);
  ASSERT_TRUE(fd.ok());
  std::string whole(large.size(), '\0');
  EXPECT_EQ(::pread(*fd, whole.data(), whole.size(), 0), static_cast<ssize_t>(large.size()));
  ::close(*fd);
  EXPECT_EQ(whole, large);
  auto path = (*store)->CompleteFilePath(kl);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  std::ifstream in(*path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), large);
  EXPECT_EQ((*store)->stats().recovered_objects, 2u);
}

TEST(StoreTest, OptionsValidationNamesTheProblem) {
  StoreOptions opt;
  EXPECT_NE(opt.Validate().message().find("at least one tier"), std::string::npos);
  opt = OneTier("/tmp/x", 0);
  EXPECT_NE(opt.Validate().message().find("quota"), std::string::npos);
  opt = OneTier("/tmp/x", 100, "fifo");
  EXPECT_NE(opt.Validate().message().find("fifo"), std::string::npos);
  opt = OneTier("/tmp/x", 100);
  opt.block_size = 3000;
  EXPECT_NE(opt.Validate().message().find("block_size 3000"), std::string::npos);
  opt = OneTier("/tmp/x", 100);
  opt.tiers[0].low = 0.99;
  EXPECT_NE(opt.Validate().message().find("low"), std::string::npos);
}

TEST(StoreTest, AdmitRejectsWrongSizes) {
  TempDir dir;
  auto store = Store::Open(OneTier(dir.path(), 1 << 24));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->AdmitObject(Key(1, 10), "abc").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*store)->AdmitBlock(Key(1, 3 << 20), 3, "x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*store)->AdmitBlock(Key(1, 3 << 20), 0, "x").status().code(), Code::kInvalidArgument);
}

TEST(StoreTest, DifferentEtagIsDifferentObject) {
  TempDir dir;
  auto store = Store::Open(OneTier(dir.path(), 1 << 24));
  ASSERT_TRUE(store.ok());
  ObjectKey v1 = Key(1, 5000);
  ObjectKey v2 = v1;
  v2.etag = "v2";
  EXPECT_NE(CacheFileName(v1), CacheFileName(v2));
  ASSERT_TRUE((*store)->AdmitObject(v1, MakeData(5000, 1)).value());
  EXPECT_TRUE((*store)->Contains(v1));
  EXPECT_FALSE((*store)->Contains(v2));
  ASSERT_TRUE((*store)->Remove(v1).ok());
  EXPECT_FALSE((*store)->Contains(v1));
  EXPECT_EQ((*store)->stats().tiers[0].used_bytes, 0u);
  EXPECT_EQ((*store)->stats().tiers[0].files, 0u);
}

TEST(StoreTest, FastestTierFillsFirstAndEvictionDemotes) {
  TempDir dir;
  StoreOptions opt{.tiers = {TierLevel{.medium = Medium::kMem,
                                       .path = dir.path() + "/mem",
                                       .quota = 1 << 20,
                                       .high = 0.9,
                                       .low = 0.5},
                             TierLevel{.medium = Medium::kSsd,
                                       .path = dir.path() + "/ssd",
                                       .quota = 8 << 20,
                                       .high = 0.9,
                                       .low = 0.5}},
                   .block_size = 1 << 20,
                   .background = false};
  auto opened = Store::Open(opt);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  const uint64_t kSize = 100 * 1024;  // 25 allocation units exactly
  for (int i = 0; i < 14; ++i)
    ASSERT_TRUE(store.AdmitObject(Key(i, kSize), MakeData(kSize, i)).value());
  for (int i = 0; i < 14; ++i) EXPECT_EQ(store.Describe(Key(i, kSize))->tier, i < 10 ? 0 : 1) << i;
  StoreStats st = store.stats();
  EXPECT_EQ(st.tiers[0].used_bytes, 10 * kSize);
  EXPECT_EQ(st.tiers[1].used_bytes, 4 * kSize);
  // Touch object 0 so it is the most recently used in MEM.
  EXPECT_EQ(ReadAll(store, Key(0, kSize)), MakeData(kSize, 0));
  store.RunEvictionOnce();  // MEM is above 90%: demote the LRU ones down to 50%
  st = store.stats();
  EXPECT_EQ(st.demotions, 5u);
  EXPECT_EQ(st.evictions, 0u);
  EXPECT_EQ(st.tiers[0].used_bytes, 5 * kSize);
  EXPECT_EQ(st.tiers[1].used_bytes, 9 * kSize);
  EXPECT_EQ(store.Describe(Key(0, kSize))->tier, 0);
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(store.Describe(Key(i, kSize))->tier, 1) << i;
  for (int i = 0; i < 14; ++i) EXPECT_EQ(ReadAll(store, Key(i, kSize)), MakeData(kSize, i)) << i;
}

TEST(StoreTest, EvictionDeletesLeastRecentlyUsedInLastTier) {
  TempDir dir;
  auto opened = Store::Open(OneTier(dir.path(), 1 << 20));
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  const uint64_t kSize = 100 * 1024;
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(store.AdmitObject(Key(i, kSize), MakeData(kSize, i)).value());
  // The tier is full: an 11th object is not admitted (not an error).
  auto r = store.AdmitObject(Key(10, kSize), MakeData(kSize, 10));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(store.stats().no_space, 1u);
  ASSERT_EQ(ReadAll(store, Key(0, kSize)), MakeData(kSize, 0));
  store.RunEvictionOnce();
  EXPECT_EQ(store.stats().evictions, 5u);
  EXPECT_TRUE(store.Contains(Key(0, kSize)));
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(store.Contains(Key(i, kSize))) << i;
  EXPECT_EQ(store.stats().tiers[0].files, 5u);
}

TEST(StoreTest, BackgroundThreadEvictsAndCheckpoints) {
  TempDir dir;
  StoreOptions opt = OneTier(dir.path(), 1 << 20);
  opt.background = true;
  opt.eviction_interval = std::chrono::milliseconds(1);
  opt.checkpoint_every_records = 5;
  auto opened = Store::Open(opt);
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  const uint64_t kSize = 100 * 1024;
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(store.AdmitObject(Key(i, kSize), MakeData(kSize, i)).value());
  // Poll (with a deadline) for the background thread's pass.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store.stats().tiers[0].used_bytes > (1 << 19) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_LE(store.stats().tiers[0].used_bytes, 1u << 19);
  EXPECT_EQ(store.stats().evictions, 5u);
  // A checkpoint replaced the first journal(s): at most two remain.
  int journals = 0;
  for (auto& f : std::filesystem::directory_iterator(dir.path())) {
    journals += f.path().filename().string().rfind("journal-", 0) == 0;
  }
  EXPECT_LE(journals, 2);
}

// A crash after a checkpoint, with a record torn in the middle: recovery
// rebuilds the index from the checkpoint and every whole journal record after
// it; only the object of the torn record is lost (its file an orphan).
TEST(StoreTest, TornJournalTailLosesOnlyTheTornRecord) {
  TempDir dir, crash;
  StoreOptions opt = OneTier(dir.path(), 64 << 20);
  std::string journal;
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 5; ++i)
      ASSERT_TRUE((*store)->AdmitObject(Key(i, 1000), MakeData(1000, i)).value());
    ASSERT_TRUE((*store)->Checkpoint().ok());  // covers 0..4
    for (int i = 5; i < 9; ++i) {
      ASSERT_TRUE((*store)->AdmitObject(Key(i, 1000), MakeData(1000, i)).value());
    }
    // The crash: the directory as it is now, before the clean close checkpoints.
    using std::filesystem::copy_options;
    std::filesystem::copy(dir.path(), crash.path(),
                          copy_options::recursive | copy_options::overwrite_existing);
  }
  for (auto& f : std::filesystem::directory_iterator(crash.path())) {
    const std::string name = f.path().filename().string();
    if (name.rfind("journal-", 0) == 0 && (journal.empty() || name > journal)) journal = name;
  }
  ASSERT_FALSE(journal.empty());
  journal = crash.path() + "/" + journal;
  // The journal after the checkpoint holds one record per admission of 5..8.
  auto count = [&] {
    return store_format::ReplayJournal(journal, [](store_format::RecordType, std::string_view) {});
  };
  ASSERT_EQ(count().value(), 4u);
  // Tear the last record (object 8) in the middle of its payload.
  const auto size = std::filesystem::file_size(journal);
  std::filesystem::resize_file(journal, size - 20);
  ASSERT_EQ(count().value(), 3u);

  auto store = Store::Open(OneTier(crash.path(), 64 << 20));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->stats().recovered_objects, 8u) << "5 from the checkpoint, 3 from the journal";
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE((*store)->Contains(Key(i, 1000))) << i;
    EXPECT_EQ(ReadAll(**store, Key(i, 1000)), MakeData(1000, i)) << i;
  }
  EXPECT_FALSE((*store)->Contains(Key(8, 1000))) << "the torn record is lost";
  EXPECT_EQ((*store)->stats().orphans_removed, 1u) << "object 8's file is an orphan";
  EXPECT_EQ((*store)->stats().tiers[0].files, 8u);
}

// A cold read into a buffer aligned as O_DIRECT needs and large enough for
// the read rounded up (as a FUSE reply buffer is) is read straight into it
// (no copy from a bounce buffer). What a reader sees: the exact
// bytes, the count cut at the object's end although the disk read is
// rounded up, later blocks too, and a corrupt file still refused.
TEST(StoreTest, AColdReadIntoAnAlignedReplyBufferReturnsExactlyTheObject) {
  TempDir dir(TempDir::Where::kOnDisk);
  StoreOptions opt = OneTier(dir.path(), 64 << 20);
  opt.drop_read_pages = true;  // cold ranges are read with O_DIRECT
  opt.block_size = 1 << 20;
  std::string small = MakeData(110'001, 21), bad = MakeData(90'000, 22);
  std::string large = MakeData((1 << 20) + 70'000, 23);
  ObjectKey ks = Key(1, small.size()), kb = Key(2, bad.size()), kl = Key(3, large.size());
  std::vector<std::string> paths;  // of ks, kb, kl
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->AdmitObject(ks, small).value());
    ASSERT_TRUE((*store)->AdmitObject(kb, bad).value());
    ASSERT_TRUE((*store)->AdmitObject(kl, large).value());
    for (const ObjectKey& k : {ks, kb, kl}) paths.push_back((*store)->Describe(k)->path);
  }
  int fd = ::open(paths[1].c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "X", 1, 4096), 1);
  ::close(fd);
  // No page cached, as after a reboot or a dropped page cache: the reads
  // below are the O_DIRECT ones.
  for (const std::string& path : paths) {
    int f = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(f, 0);
    ASSERT_EQ(::fdatasync(f), 0);
    ASSERT_EQ(::posix_fadvise(f, 0, 0, POSIX_FADV_DONTNEED), 0);
    ::close(f);
  }
  constexpr size_t kCapacity = 256 << 10;  // as a FUSE READ of 256 KiB
  std::unique_ptr<char, decltype(&std::free)> mem(
      static_cast<char*>(std::aligned_alloc(4096, 2 << 20)), &std::free);
  ASSERT_NE(mem, nullptr);
  std::span<char> reply(mem.get(), kCapacity);
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  // Twice: the first read after the restart is the checksum check's, the
  // second a plain cold read (the first left no page behind).
  for (int round = 0; round < 2; ++round) {
    std::memset(mem.get(), '?', 2 << 20);
    auto n = (*store)->Read(ks, 0, reply);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, small.size()) << "round " << round;
    EXPECT_EQ(std::string_view(mem.get(), *n), small) << "round " << round;
  }
  EXPECT_EQ((*store)->Read(kb, 0, reply).status().code(), Code::kNotFound);
  EXPECT_EQ((*store)->stats().checksum_failures, 1u);
  // The second block of a larger object (aligned offset, short last page).
  std::span<char> whole(mem.get(), 2 << 20);
  for (int round = 0; round < 2; ++round) {
    auto n = (*store)->Read(kl, 1 << 20, whole);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 70'000u);
    EXPECT_EQ(std::string_view(mem.get(), *n), std::string_view(large).substr(1 << 20));
  }
  // Its first block, into a buffer exactly the block's size.
  auto n = (*store)->Read(kl, 0, std::span<char>(mem.get(), 1 << 20));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string_view(mem.get(), *n), std::string_view(large).substr(0, 1 << 20));
}

TEST(StoreTest, CorruptCheckpointComesBackColdNeverWrong) {
  TempDir dir;
  StoreOptions opt = OneTier(dir.path(), 64 << 20);
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE((*store)->AdmitObject(Key(i, 1000), MakeData(1000, i)).value());
    }
  }  // the clean close checkpoints everything; the journal after it is empty
  std::string ckpt = dir.path() + "/index.ckpt";
  int fd = ::open(ckpt.c_str(), O_WRONLY);
  ASSERT_EQ(::pwrite(fd, "XX", 2, 40), 2);
  ::close(fd);
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (int i = 0; i < 8; ++i) EXPECT_FALSE((*store)->Contains(Key(i, 1000))) << i;
  EXPECT_EQ((*store)->stats().orphans_removed, 8u);
  EXPECT_EQ((*store)->stats().tiers[0].files, 0u);
}

// Under random-permutation epochs a cache holding 35% of the
// dataset should hit ~35% of reads from epoch 2 on with the training policy
// (LRU thrashes; printed for comparison, asserted only loosely).
TEST(StorePolicyTest, TrainingKeepsHitRateAtCachedFraction) {
  std::vector<double> rates[2];
  const char* policies[2] = {"training", "lru"};
  for (int p = 0; p < 2; ++p) {
    TempDir dir;
    auto r = SimulateEpochs({.dir = dir.path() + "/tier", .policy = policies[p]});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    rates[p] = *r;
  }
  std::printf("hit rate by epoch, 10,000 objects, cache 35%%:\n  epoch  training  lru\n");
  for (size_t e = 0; e < rates[0].size(); ++e) {
    std::printf("  %5zu  %7.1f%%  %5.1f%%\n", e + 1, 100 * rates[0][e], 100 * rates[1][e]);
  }
  EXPECT_EQ(rates[0][0], 0.0);
  for (size_t e = 1; e < rates[0].size(); ++e) {
    EXPECT_GE(rates[0][e], 0.33) << "training, epoch " << e + 1;
    EXPECT_LE(rates[0][e], 0.36) << "training, epoch " << e + 1;
    EXPECT_LT(rates[1][e], rates[0][e]) << "lru, epoch " << e + 1;
  }
}

TEST(StoreTest, SecondStoreOnSameDirectoryIsRefused) {
  TempDir dir;
  auto a = Store::Open(OneTier(dir.path(), 1 << 20));
  ASSERT_TRUE(a.ok());
  auto b = Store::Open(OneTier(dir.path(), 1 << 20));
  EXPECT_EQ(b.status().code(), Code::kUnavailable);
  EXPECT_NE(b.status().message().find("in use"), std::string::npos);
  // Sharing only a tier directory is refused too.
  StoreOptions other = OneTier(dir.path(), 1 << 20);
  other.index_dir = dir.path() + "/elsewhere";
  EXPECT_EQ(Store::Open(other).status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace granary

namespace granary {
namespace {

// Pages of `fd`'s first `len` bytes that sit in the page cache.
// A new directory under /var/tmp (a disk file system, unlike TempDir's
// /dev/shm), or "" when /var/tmp is tmpfs, whose pages can be neither dropped
// nor bypassed. The caller removes it.
std::string DiskTempDir(const std::string& name) {
  std::string tmpl = "/var/tmp/granary-store-" + name + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << tmpl << ": " << std::strerror(errno);
    return "";
  }
  struct statfs fs {};
  if (::statfs(tmpl.c_str(), &fs) != 0 || fs.f_type == TMPFS_MAGIC) {
    std::filesystem::remove_all(tmpl);
    return "";
  }
  return tmpl;
}

size_t ResidentPages(int fd, size_t len) {
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return SIZE_MAX;
  std::vector<unsigned char> vec((len + 4095) / 4096);
  size_t resident = SIZE_MAX;
  if (::mincore(map, len, vec.data()) == 0) {
    resident = 0;
    for (unsigned char v : vec) resident += v & 1;
  }
  ::munmap(map, len);
  return resident;
}

// drop_read_pages (the cached read mode): a read leaves none of the cache
// file in the page cache, so the mount's own copy is the only one; without it
// the pages stay.
TEST(StoreTest, ReadsForADroppingMountComeFromDiskOnceAndLeaveNoPages) {
  // On a disk file system: tmpfs pages cannot be dropped.
  std::string tmpl = DiskTempDir("verify");
  if (tmpl.empty()) GTEST_SKIP() << "/var/tmp is tmpfs: its pages cannot be dropped";
  StoreOptions opt = OneTier(tmpl + "/ssd", 64ull << 20);
  opt.drop_read_pages = true;
  std::string small = MakeData(300'000, 11);
  std::string large = MakeData(2'500'000, 12);  // three 1 MiB blocks
  ObjectKey ks = Key(1, small.size());
  ObjectKey kl = Key(2, large.size());
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->AdmitObject(ks, small).value());
    ASSERT_TRUE((*store)->AdmitObject(kl, large).value());
    for (const ObjectKey& k : {ks, kl}) {
      auto fd = (*store)->OpenCompleteFile(k);
      ASSERT_TRUE(fd.ok());
      ASSERT_EQ(::fsync(*fd), 0);  // clean pages: the kernel may drop them
      // Nothing in the page cache: the reads below come from the disk.
      ASSERT_EQ(::posix_fadvise(*fd, 0, 0, POSIX_FADV_DONTNEED), 0);
      ::close(*fd);
    }
  }
  auto store = Store::Open(opt);  // restart: every block is unverified again
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  // A range inside one block, a range across two, and the whole small object.
  std::string buf(5000, '\0');
  auto n = (*store)->Read(kl, (1 << 20) + 123, std::span(buf));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(buf == large.substr((1 << 20) + 123, 5000));
  n = (*store)->Read(kl, (2 << 20) - 100, std::span(buf));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(buf == large.substr((2 << 20) - 100, 5000));
  EXPECT_EQ(ReadAll(**store, ks), small);
  // Again, now verified and not in the page cache: unaligned ranges read
  // from the disk.
  n = (*store)->Read(kl, (2 << 20) - 100, std::span(buf));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(buf == large.substr((2 << 20) - 100, 5000));
  std::string part(200'001, '\0');
  n = (*store)->Read(ks, 99'999, std::span(part));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, small.size() - 99'999);
  EXPECT_TRUE(part == small.substr(99'999));
  // No copy left in the page cache.
  for (const ObjectKey& k : {ks, kl}) {
    auto fd = (*store)->OpenCompleteFile(k);
    ASSERT_TRUE(fd.ok());
    EXPECT_EQ(ResidentPages(*fd, k.size), 0u) << k.key;
    ::close(*fd);
  }
  EXPECT_EQ((*store)->stats().checksum_failures, 0u);
  store->reset();  // close before the directory goes
  std::filesystem::remove_all(tmpl);
}

TEST(StoreTest, DropReadPagesLeavesNoCopyInThePageCache) {
  // Not TempDir: that prefers /dev/shm, and tmpfs pages cannot be dropped.
  std::string tmpl = DiskTempDir("drop");
  if (tmpl.empty()) GTEST_SKIP() << "/var/tmp is tmpfs: its pages cannot be dropped";
  for (bool drop : {false, true}) {
    std::string dir = tmpl + (drop ? "/drop" : "/keep");
    StoreOptions opt = OneTier(dir + "/ssd", 64ull << 20);
    opt.drop_read_pages = drop;
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::string data = MakeData(400'000, 9);
    ObjectKey k = Key(1, data.size());
    ASSERT_TRUE((*store)->AdmitObject(k, data).value());
    auto fd = (*store)->OpenCompleteFile(k);
    ASSERT_TRUE(fd.ok());
    ASSERT_EQ(::fsync(*fd), 0);  // clean pages: the kernel may drop them
    std::string buf(data.size(), '\0');
    auto n = (*store)->Read(k, 0, std::span(buf));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(buf, data);
    size_t resident = ResidentPages(*fd, data.size());
    ::close(*fd);
    if (drop) {
      EXPECT_EQ(resident, 0u);
    } else {
      EXPECT_GT(resident, 0u);  // written and read just now: still cached
    }
  }
  std::filesystem::remove_all(tmpl);
}

// `k`'s complete cache file holds exactly `data`, and was written around the
// page cache (`direct`: at most the sub-4 KiB tail resident) or through it
// (every page resident, for files of at least a page); the store reads it back.
void ExpectCachedAround(Store& store, const ObjectKey& k, const std::string& data, bool direct) {
  auto fd = store.OpenCompleteFile(k);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  struct stat st {};
  ASSERT_EQ(::fstat(*fd, &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), data.size());
  const size_t pages = (data.size() + 4095) / 4096;
  const size_t resident = ResidentPages(*fd, data.size());
  if (direct) {
    EXPECT_LE(resident, 1u) << "only the sub-4 KiB tail goes through the page cache";
  } else if (data.size() >= 4096) {
    EXPECT_EQ(resident, pages);  // written just now through the page cache
  }
  std::string back(data.size(), '\0');
  EXPECT_EQ(::pread(*fd, back.data(), back.size(), 0), static_cast<ssize_t>(data.size()));
  ::close(*fd);
  EXPECT_TRUE(back == data) << "bytes differ";
  EXPECT_EQ(ReadAll(store, k), data);
}

TEST(StoreTest, ServedAdmissionsBypassThePageCacheInDropReadPagesMode) {
  // On a disk file system (tmpfs has no page cache to bypass).
  std::string tmpl = DiskTempDir("direct");
  if (tmpl.empty()) GTEST_SKIP() << "/var/tmp is tmpfs: no page cache to bypass";
  // Sizes around the 4 KiB alignment and past the 1 MiB direct-write piece.
  const std::vector<size_t> sizes = {
      1, 4095, 4096, 4097, 110'000, (1u << 20) + 4096, (3u << 20) / 2 + 7};
  struct Case {
    const char* name;
    bool drop_read_pages;
    bool served;
    bool direct;  // expected: written around the page cache
  };
  const Case cases[] = {
      {"served, drop_read_pages", true, true, true},
      {"warm-up, drop_read_pages", true, false, false},   // read back soon by the mount
      {"served, passthrough store", false, true, false},  // the file backs later opens
  };
  int n = 0;
  for (const Case& c : cases) {
    std::string dir = tmpl + "/" + std::to_string(n++);
    StoreOptions opt = OneTier(dir + "/ssd", 64ull << 20);
    opt.block_size = 4 << 20;  // every size below is one whole object
    opt.drop_read_pages = c.drop_read_pages;
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE(std::string(c.name) + " size=" + std::to_string(sizes[i]));
      std::string data = MakeData(sizes[i], 20 + i);
      ObjectKey k = Key(static_cast<int>(i), data.size());
      ASSERT_TRUE((*store)->AdmitBlock(k, 0, data, c.served).value());
      ExpectCachedAround(**store, k, data, c.direct);
    }
  }
  std::filesystem::remove_all(tmpl);
}

// The same for the blocks of a large object (a streamed shard): a block
// already served (or put into the mount's page cache) goes to the disk with
// O_DIRECT -- straight from an aligned BlockBuffer, through a bounce buffer
// from unaligned bytes -- and one fetched for a later reader stays buffered.
TEST(StoreTest, ServedBlocksOfALargeObjectBypassThePageCacheInDropReadPagesMode) {
  std::string tmpl = DiskTempDir("direct-large");
  if (tmpl.empty()) GTEST_SKIP() << "/var/tmp is tmpfs: no page cache to bypass";
  constexpr uint64_t kBlock = 1 << 20;
  const std::string data = MakeData(3 * kBlock + kBlock / 2 + 7, 77);  // 4 blocks, odd tail
  int n = 0;
  for (bool served : {true, false}) {
    SCOPED_TRACE(served ? "served" : "for a later reader");
    std::string dir = tmpl + "/" + std::to_string(n++);
    StoreOptions opt = OneTier(dir + "/ssd", 64ull << 20);
    opt.block_size = kBlock;
    opt.drop_read_pages = true;
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ObjectKey k = Key(1, data.size());
    for (uint64_t b = 0; b * kBlock < data.size(); ++b) {
      std::string_view piece = std::string_view(data).substr(b * kBlock, kBlock);
      // Even blocks from an aligned buffer, odd ones from a plain string.
      auto aligned = BlockBuffer::Copy(piece);
      std::string plain(piece);
      std::string_view bytes = b % 2 == 0 ? aligned->view() : std::string_view(plain);
      ASSERT_TRUE((*store)->AdmitBlock(k, b, bytes, served).value()) << b;
    }
    ExpectCachedAround(**store, k, data, served);
  }
  std::filesystem::remove_all(tmpl);
}

// On ext4 the tier directory is marked FS_TOPDIR_FL before its
// fan-out directories are made, so they (and the cache files) spread over the
// block groups instead of sharing the group of whatever was just deleted.
TEST(StoreTest, TierDirectorySpreadsItsFanOutDirectories) {
  std::string tmpl = DiskTempDir("topdir");
  if (tmpl.empty()) GTEST_SKIP() << "/var/tmp is tmpfs: no inode flags";
  const std::string tier = tmpl + "/ssd";
  auto store = Store::Open(OneTier(tier, 64ull << 20));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  int fd = ::open(tier.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  int flags = 0;
  const bool have_flags = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  ::close(fd);
  std::filesystem::remove_all(tmpl);
  if (!have_flags) GTEST_SKIP() << "the file system of /var/tmp has no inode flags";
  EXPECT_NE(flags & FS_TOPDIR_FL, 0) << "flags " << std::hex << flags;
}

}  // namespace
}  // namespace granary
