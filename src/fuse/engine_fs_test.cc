// EngineFs over MemUfs + a real Store: attributes, lookups, paged readdir,
// reads, and Open offering the cache file only once an object is complete.
#include "fuse/engine_fs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "testing/mem_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

class EngineFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("granary-enginefs-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "cache");
    ufs_ = std::make_shared<testing::MemUfs>("mem://bkt");
    for (int i = 0; i < 600; ++i) {
      std::string path = "d" + std::to_string(i % 2) + "/f" + std::to_string(i);
      objects_[path] = std::string(100 + i, static_cast<char>('a' + i % 26));
      ufs_->Put("ds/" + path, objects_[path], 1'700'000'000'123'456'789 + i);
    }
    objects_["big"] = std::string(300'000, 'z');
    ufs_->Put("ds/big", objects_["big"]);
    auto snap =
        Snapshot::Build(*ufs_, SnapshotOptions{.source_uri = "mem://bkt/ds", .prefix = "ds"},
                        (dir_ / "snapshot").string(), 1);
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    snapshot_ = std::move(*snap);
    auto store = Store::Open(StoreOptions{
        .tiers = {TierLevel{
            .medium = Medium::kSsd, .path = (dir_ / "cache").string(), .quota = 1ull << 30}},
        .block_size = 64 << 10,
        .background = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    engine_ = std::make_unique<CacheEngine>(ufs_, snapshot_, store_.get(),
                                            EngineOptions{.dataset = "ds"});
    fs_ = std::make_unique<EngineFs>(engine_.get(), EngineFsOptions{.readdir_page = 64});
  }
  void TearDown() override {
    fs_.reset();
    engine_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  fs::path dir_;
  std::shared_ptr<testing::MemUfs> ufs_;
  std::map<std::string, std::string> objects_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CacheEngine> engine_;
  std::unique_ptr<EngineFs> fs_;
};

TEST_F(EngineFsTest, LookupAndGetAttrShowSizesMtimesAndDirectories) {
  auto d0 = fs_->Lookup(kRootIno, "d0");
  ASSERT_TRUE(d0.ok());
  EXPECT_TRUE(d0->is_dir);
  EXPECT_EQ(d0->mtime_ns, snapshot_->created_ns());
  auto f = fs_->Lookup(d0->ino, "f4");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->is_dir);
  EXPECT_EQ(f->size, 104u);
  EXPECT_EQ(f->mtime_ns, 1'700'000'000'123'456'789 + 4);
  auto again = fs_->GetAttr(f->ino);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size, 104u);
  EXPECT_EQ(fs_->Lookup(d0->ino, "nope").status().code(), Code::kNotFound);
  EXPECT_EQ(fs_->GetAttr(1'000'000).status().code(), Code::kNotFound);
}

TEST_F(EngineFsTest, ReadDirListsEveryChildOnceAcrossPagesAndOffsets) {
  auto d1 = fs_->Lookup(kRootIno, "d1");
  ASSERT_TRUE(d1.ok());
  std::vector<std::string> names;
  uint64_t offset = 0;
  for (;;) {  // the kernel's pattern: a bounded reply, then resume at the next position
    size_t got = 0;
    ASSERT_TRUE(fs_->ReadDir(d1->ino, offset,
                             [&](const DirEntry& e) {
                               if (got == 100) return false;
                               names.push_back(e.name);
                               ++got;
                               return true;
                             })
                    .ok());
    if (got == 0) break;
    offset += got;
  }
  EXPECT_EQ(names.size(), 300u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

TEST_F(EngineFsTest, ReadsEqualTheSourceAndOpenOffersTheCacheFileOnceComplete) {
  uint64_t ino = *snapshot_->FindPath("big");
  auto opened = fs_->Open(ino, 0);
  ASSERT_TRUE(opened.ok());
  EXPECT_TRUE(opened->backing_path.empty());  // not cached yet: userspace reads
  std::string buf(1 << 20, '\0');
  auto n = fs_->Read(ino, opened->fh, 1000, std::span<char>(buf.data(), buf.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 300'000u - 1000);
  EXPECT_EQ(buf.substr(0, *n), objects_["big"].substr(1000));
  auto past = fs_->Read(ino, 0, 400'000, std::span<char>(buf.data(), 10));
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(*past, 0u);

  auto fetched = engine_->Fetch(ino);
  ASSERT_TRUE(fetched.ok() && *fetched);
  auto warm = fs_->Open(ino, 0);
  ASSERT_TRUE(warm.ok());
  ASSERT_FALSE(warm->backing_path.empty());
  std::string on_disk;
  {
    std::ifstream in(warm->backing_path, std::ios::binary);
    on_disk.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(on_disk, objects_["big"]);
  EXPECT_EQ(fs_->stats().backing_offers, 1u);
}

// What HIT RATIO's file count asks (TakeMiss): whether a file's reads since
// it was last asked needed the origin.
TEST_F(EngineFsTest, AFileReadFromTheOriginIsReportedOnceAsAMiss) {
  const uint64_t a = *snapshot_->FindPath("d0/f0");
  const uint64_t b = *snapshot_->FindPath("d1/f1");
  const uint64_t c = *snapshot_->FindPath("d0/f2");
  std::string buf(4096, '\0');
  const std::span<char> out(buf.data(), buf.size());
  ASSERT_TRUE(fs_->Read(b, 0, 0, out).ok());
  EXPECT_FALSE(fs_->TakeMiss(b)) << "nothing is recorded before TrackMisses";
  fs_->TrackMisses();
  ASSERT_TRUE(fs_->Read(c, 0, 0, out).ok());  // cold: from the origin
  EXPECT_TRUE(fs_->TakeMiss(c));
  EXPECT_FALSE(fs_->TakeMiss(c)) << "forgotten once asked";
  ASSERT_TRUE(engine_->Fetch(a).value_or(false));  // cached and admitted
  ASSERT_TRUE(fs_->Read(a, 0, 0, out).ok());
  EXPECT_FALSE(fs_->TakeMiss(a)) << "read from the cache";
  // A new counting window forgets the misses of files not asked about.
  const uint64_t d = *snapshot_->FindPath("d1/f3");
  ASSERT_TRUE(fs_->Read(d, 0, 0, out).ok());
  fs_->TrackMisses();
  EXPECT_FALSE(fs_->TakeMiss(d));
}

TEST_F(EngineFsTest, NoBackingOfferedWhenPassthroughIsOff) {
  EngineFs off(engine_.get(), EngineFsOptions{.offer_backing = false});
  uint64_t ino = *snapshot_->FindPath("d0/f0");
  ASSERT_TRUE(engine_->Fetch(ino).ok());
  auto opened = off.Open(ino, 0);
  ASSERT_TRUE(opened.ok());
  EXPECT_TRUE(opened->backing_path.empty());
}

TEST_F(EngineFsTest, NewVersionsGetFreshNodeIdsAndOldNodesKeepTheirVersion) {
  auto old_f = fs_->Lookup(fs_->Lookup(kRootIno, "d0")->ino, "f4");
  ASSERT_TRUE(old_f.ok());
  ufs_->Put("ds/d0/f4", std::string(7, 'N'));
  ufs_->Put("ds/e/new", "new");
  auto v2 = Snapshot::Rebuild(*ufs_, *snapshot_, (dir_ / "snapshot").string());
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  std::shared_ptr<const Snapshot> next = std::move(*v2);
  engine_->SetSnapshot(next);
  std::vector<std::string> names = fs_->AddVersion(next);
  EXPECT_EQ(names, (std::vector<std::string>{"big", "d0", "d1", "e"}));

  auto new_f = fs_->Lookup(fs_->Lookup(kRootIno, "d0")->ino, "f4");
  ASSERT_TRUE(new_f.ok());
  EXPECT_GT(new_f->ino, snapshot_->max_ino());  // never a reused id
  EXPECT_EQ(new_f->size, 7u);
  EXPECT_TRUE(fs_->Lookup(kRootIno, "e").ok());
  // The node the kernel learned before keeps naming the old entry.
  auto old_attr = fs_->GetAttr(old_f->ino);
  ASSERT_TRUE(old_attr.ok());
  EXPECT_EQ(old_attr->size, 104u);
  std::string buf(200, '\0');
  auto n = fs_->Read(new_f->ino, 0, 0, std::span<char>(buf.data(), buf.size()));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(buf.substr(0, *n), std::string(7, 'N'));
  // Its object changed at the origin and was never cached: Stale, not new bytes.
  auto stale = fs_->Read(old_f->ino, 0, 0, std::span<char>(buf.data(), buf.size()));
  EXPECT_EQ(stale.status().code(), Code::kStale) << stale.status().ToString();

  // Versions beyond the kept ones are dropped: their nodes answer Stale.
  for (size_t i = 0; i < EngineFs::kKeptVersions; ++i) {
    auto v = Snapshot::Rebuild(*ufs_, *engine_->snapshot(), (dir_ / "snapshot").string());
    ASSERT_TRUE(v.ok());
    std::shared_ptr<const Snapshot> sp = std::move(*v);
    engine_->SetSnapshot(sp);
    fs_->AddVersion(sp);
  }
  EXPECT_EQ(fs_->GetAttr(old_f->ino).status().code(), Code::kStale);
  EXPECT_EQ(fs_->stats().stale_nodes, 1u);
  EXPECT_TRUE(fs_->Lookup(fs_->Lookup(kRootIno, "d1")->ino, "f5").ok());
}

}  // namespace
}  // namespace granary
