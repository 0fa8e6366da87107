// The store's checksums: the sum recorded at admission (given by the caller
// or computed), verified on the first read after a restart, corrupt blocks
// refused and dropped, and the region and sum a peer is sent from.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "store/store.h"
#include "testing/store_test_util.h"

namespace granary {
namespace {

using testing_util::Key;
using testing_util::MakeData;
using testing_util::OneTier;
using testing_util::ReadAll;
using testing_util::TempDir;

TEST(StoreTest, AChecksumGivenAtAdmissionIsTheOneVerifiedAfterRestart) {
  TempDir dir;
  StoreOptions opt = OneTier(dir.path(), 64 << 20);
  opt.block_size = 1 << 20;
  const std::string small = MakeData(110'000, 3);
  const std::string large = MakeData(2 << 20, 4);
  const ObjectKey ks = Key(1, small.size()), kl = Key(2, large.size());
  const std::string_view b0 = std::string_view(large).substr(0, 1 << 20);
  const std::string_view b1 = std::string_view(large).substr(1 << 20);
  const auto sum = [](std::string_view s) { return XXH3_64bits(s.data(), s.size()); };
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->AdmitBlock(ks, 0, small, false, AdmitKind::kOwned, sum(small)).value());
    ASSERT_TRUE((*store)->AdmitBlock(kl, 0, b0, false, AdmitKind::kOwned, sum(b0)).value());
    // A wrong sum for block 1 (as if the bytes had changed after hashing).
    ASSERT_TRUE((*store)->AdmitBlock(kl, 1, b1, false, AdmitKind::kOwned, sum(b1) ^ 1).value());
  }
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  std::string buf(1000, '\0');
  ASSERT_TRUE((*store)->Read(ks, 500, std::span(buf)).ok());
  EXPECT_EQ(buf, small.substr(500, 1000));
  ASSERT_TRUE((*store)->Read(kl, 10, std::span(buf)).ok());
  EXPECT_EQ(buf, large.substr(10, 1000));
  EXPECT_EQ((*store)->stats().checksum_failures, 0u);
  EXPECT_FALSE((*store)->Read(kl, (1 << 20) + 10, std::span(buf)).ok());
  EXPECT_EQ((*store)->stats().checksum_failures, 1u);
  EXPECT_FALSE((*store)->Contains(kl));
}

TEST(StoreTest, CorruptFilesAreDroppedAfterRestart) {
  TempDir dir;
  StoreOptions opt = OneTier(dir.path(), 64 << 20);
  std::string small = MakeData(110'000, 7);
  std::string large = MakeData(3 << 20, 8);
  ObjectKey ks = Key(1, small.size()), kl = Key(2, large.size());
  std::string small_path, large_path;
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->AdmitObject(ks, small).value());
    ASSERT_TRUE((*store)->AdmitObject(kl, large).value());
    small_path = (*store)->Describe(ks)->path;
    large_path = (*store)->Describe(kl)->path;
  }
  auto flip = [](const std::string& path, off_t at) {
    int fd = ::open(path.c_str(), O_RDWR);
    char c;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
    ::close(fd);
  };
  flip(small_path, 5000);
  flip(large_path, (1 << 20) + 12345);  // inside block 1
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  std::string buf(1000, '\0');
  EXPECT_EQ((*store)->Read(ks, 0, std::span(buf)).status().code(), Code::kNotFound);
  EXPECT_EQ((*store)->stats().checksum_failures, 1u);
  EXPECT_FALSE((*store)->Contains(ks));
  auto n = (*store)->Read(kl, 10, std::span(buf));  // block 0 is intact
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(buf, large.substr(10, 1000));
  // The passthrough path check verifies too (and drops the file); so does
  // the open after it.
  EXPECT_EQ((*store)->CompleteFilePath(kl).status().code(), Code::kNotFound);
  EXPECT_EQ((*store)->OpenCompleteFile(kl).status().code(), Code::kNotFound);
  EXPECT_EQ((*store)->stats().checksum_failures, 2u);
  EXPECT_FALSE(std::filesystem::exists(small_path));
  EXPECT_EQ((*store)->stats().tiers[0].used_bytes, 0u);
  // The engine refetches and admits again.
  ASSERT_TRUE((*store)->AdmitObject(ks, small).value());
  EXPECT_EQ(ReadAll(**store, ks), small);
}

// What a peer is sent from: the block where it lies in its cache file, with
// the checksum recorded at admission (the frame's payload checksum); a
// block corrupted on disk since is refused once the store is reopened.
TEST(StoreTest, OpenBlockFileGivesTheBlocksRegionAndItsRecordedChecksum) {
  TempDir dir;
  StoreOptions opt = OneTier(dir.path(), 64 << 20);
  std::string small = MakeData(110'000, 9);
  std::string large = MakeData((2 << 20) + 4321, 10);
  ObjectKey ks = Key(1, small.size()), kl = Key(2, large.size());
  auto read_region = [](const Store::BlockFile& f) {
    std::string bytes(f.length, '\0');
    EXPECT_EQ(::pread(f.fd, bytes.data(), bytes.size(), static_cast<off_t>(f.offset)),
              static_cast<ssize_t>(bytes.size()));
    ::close(f.fd);
    return bytes;
  };
  std::string large_path;
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->OpenBlockFile(ks, 0).status().code(), Code::kNotFound);
    ASSERT_TRUE((*store)->AdmitObject(ks, small).value());
    ASSERT_TRUE((*store)->AdmitBlock(kl, 2, std::string_view(large).substr(2 << 20)).value());
    EXPECT_EQ((*store)->OpenBlockFile(kl, 1).status().code(), Code::kNotFound);  // not admitted
    EXPECT_EQ((*store)->OpenBlockFile(kl, 3).status().code(), Code::kNotFound);  // past the end
    auto fs = (*store)->OpenBlockFile(ks, 0);
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    EXPECT_EQ(fs->offset, 0u);
    EXPECT_EQ(fs->checksum, XXH3_64bits(small.data(), small.size()));
    EXPECT_EQ(read_region(*fs), small);
    auto fl = (*store)->OpenBlockFile(kl, 2);
    ASSERT_TRUE(fl.ok()) << fl.status().ToString();
    EXPECT_EQ(fl->offset, 2u << 20);
    EXPECT_EQ(fl->length, 4321u);
    EXPECT_EQ(fl->checksum, XXH3_64bits(large.data() + (2 << 20), 4321));
    EXPECT_EQ(read_region(*fl), large.substr(2 << 20));
    large_path = (*store)->Describe(kl)->path;
  }
  int fd = ::open(large_path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, (2 << 20) + 100), 1);
  c ^= 0x5a;
  ASSERT_EQ(::pwrite(fd, &c, 1, (2 << 20) + 100), 1);
  ::close(fd);
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->OpenBlockFile(kl, 2).status().code(), Code::kNotFound);
  EXPECT_EQ((*store)->stats().checksum_failures, 1u);
  auto fs = (*store)->OpenBlockFile(ks, 0);  // verified on its first use, then sent
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  EXPECT_EQ(read_region(*fs), small);
}

// A small file's first read after a restart asks for its whole
// (only) block; the block is verified in the caller's buffer, with and
// without drop_read_pages, and a corrupt one is still refused.
TEST(StoreTest, AWholeBlockReadAfterARestartIsVerifiedInTheCallersBuffer) {
  for (bool drop : {false, true}) {
    TempDir dir;
    StoreOptions opt = OneTier(dir.path(), 64 << 20);
    opt.drop_read_pages = drop;
    std::string good = MakeData(110'000, 11), bad = MakeData(110'000, 12);
    std::string large = MakeData((1 << 20) + 5000, 13);  // a whole first block of a larger file
    ObjectKey kg = Key(1, good.size()), kb = Key(2, bad.size()), kl = Key(3, large.size());
    std::string bad_path;
    {
      auto store = Store::Open(opt);
      ASSERT_TRUE(store.ok());
      ASSERT_TRUE((*store)->AdmitObject(kg, good).value());
      ASSERT_TRUE((*store)->AdmitObject(kb, bad).value());
      ASSERT_TRUE((*store)->AdmitObject(kl, large).value());
      bad_path = (*store)->Describe(kb)->path;
    }
    int fd = ::open(bad_path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "X", 1, 777), 1);
    ::close(fd);
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok());
    std::string buf(good.size(), '\0');
    auto n = (*store)->Read(kg, 0, std::span(buf));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, good.size());
    EXPECT_TRUE(buf == good) << "drop " << drop;
    std::string bbuf(bad.size(), '\0');
    EXPECT_EQ((*store)->Read(kb, 0, std::span(bbuf)).status().code(), Code::kNotFound);
    EXPECT_EQ((*store)->stats().checksum_failures, 1u);
    std::string lbuf(1 << 20, '\0');
    n = (*store)->Read(kl, 0, std::span(lbuf));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_TRUE(lbuf == large.substr(0, 1 << 20));
    std::string tail(5000, '\0');
    n = (*store)->Read(kl, 1 << 20, std::span(tail));  // block 1, whole: also checked in place
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_TRUE(tail == large.substr(1 << 20));
  }
}

}  // namespace
}  // namespace granary
