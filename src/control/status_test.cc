// Status figures equal the truth; the Fluid summary and the table are well formed.
#include "control/status.h"

#include "testing/dataset_fixture.h"

namespace granary {
namespace {

class StatusTest : public DatasetFixture {
 protected:
  // The figures from the counters equal those of asking about every file.
  static void ExpectSameAsScan(const DatasetStatus& s, const CachedFigures& scan) {
    EXPECT_EQ(s.cached_files, scan.files);
    EXPECT_EQ(s.cached_bytes, scan.bytes);
    EXPECT_EQ(s.owned_cached_files, scan.owned_files);
    EXPECT_EQ(s.owned_cached_bytes, scan.owned_bytes);
  }
};

TEST_F(StatusTest, FiguresEqualTheTruthBeforeAndAfterLoad) {
  for (int i = 0; i < 40; ++i)
    Put("d" + std::to_string(i % 3) + "/f" + std::to_string(i), 1000 + 37 * i);
  Put("big.bin", 300'000);
  Open(/*quota=*/64 << 20);
  LoadManager loads(engine_);
  StatusReporter reporter(engine_, &loads, "/mnt/x");

  DatasetStatus s = reporter.Compute();
  EXPECT_EQ(s.name, "s3://bkt/ds");
  EXPECT_EQ(s.ufs_files, sizes_.size());
  EXPECT_EQ(s.ufs_total_bytes, total_bytes_);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.capacity, 64u << 20);
  EXPECT_EQ(s.phase, "Ready");

  // Half the files by reading them.
  uint64_t want_bytes = 0, want_files = 0;
  std::string buf(400'000, '\0');
  snapshot_->ForEachFile([&](const EntryView& e) {
    if (e.ino % 2) return;
    ASSERT_TRUE(engine_->Fetch(e.ino).ok());
    want_bytes += e.size;
    ++want_files;
  });
  s = reporter.Compute();
  EXPECT_EQ(s.cached_files, want_files);
  EXPECT_EQ(s.cached_bytes, want_bytes);
  EXPECT_EQ(s.owned_cached_files, want_files);  // a single node owns everything
  EXPECT_EQ(s.owned_cached_bytes, want_bytes);
  EXPECT_EQ(s.owned_block_bytes, want_bytes);
  ExpectSameAsScan(s, ScanCachedFiles(*engine_, *snapshot_));

  auto job = loads.Start({.threads = 4});
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE((*job)->Wait().complete());
  s = reporter.Compute();
  EXPECT_EQ(s.cached_bytes, s.ufs_total_bytes);
  EXPECT_EQ(s.cached_files, s.ufs_files);
  EXPECT_EQ(s.cached_ratio, 1.0);
  EXPECT_EQ(s.owned_block_bytes, s.ufs_total_bytes);
  ExpectSameAsScan(s, ScanCachedFiles(*engine_, *snapshot_));
  EXPECT_EQ(FluidSummary(s)["cachedPercentage"], "100.0%");
  ASSERT_TRUE(s.load.has_value());
  EXPECT_FALSE(s.load->running);
  EXPECT_EQ(s.load->files_done, sizes_.size());

  // Reads now hit: ratio by bytes is 1 for these reads.
  snapshot_->ForEachFile([&](const EntryView& e) {
    ASSERT_TRUE(engine_->Read(e.ino, 0, std::span<char>(buf.data(), buf.size())).ok());
  });
  s = reporter.Compute();
  EXPECT_EQ(s.hit_reads, s.reads);
  EXPECT_DOUBLE_EQ(s.hit_ratio_reads, 1.0);

  // JSON round trip and the Fluid summary's string keys.
  auto back = StatusFromJson(nlohmann::json::parse(StatusToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cached_bytes, s.cached_bytes);
  EXPECT_EQ(back->owned_block_bytes, s.owned_block_bytes);
  EXPECT_EQ(back->tiers.size(), 1u);
  nlohmann::json fluid = nlohmann::json::parse(FluidSummary(s).dump());
  for (const char* key :
       {"cached", "cachedPercentage", "cacheCapacity", "cacheHitRatio", "fileNum", "ufsTotal"}) {
    ASSERT_TRUE(fluid.contains(key)) << key;
    EXPECT_TRUE(fluid[key].is_string()) << key;
  }
  EXPECT_EQ(fluid["fileNum"], std::to_string(sizes_.size()));
  EXPECT_EQ(fluid["cacheCapacity"], "64.00MiB");

  std::string table = FormatStatusTable({s}, /*verbose=*/true);
  EXPECT_NE(table.find("NAME"), std::string::npos);
  EXPECT_NE(table.find("PHASE"), std::string::npos);
  EXPECT_NE(table.find("s3://bkt/ds"), std::string::npos);
  EXPECT_NE(table.find("100.0%"), std::string::npos);
  EXPECT_NE(table.find("SSD"), std::string::npos);
  EXPECT_EQ(table.find("page cache"), std::string::npos);  // no mount: no note
  EXPECT_EQ(back->read_mode, "");

  // A mount in cached read mode: the table says what HIT RATIO cannot see,
  // and the JSON carries the mode.
  s.read_mode = "cached";
  back = StatusFromJson(nlohmann::json::parse(StatusToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->read_mode, "cached");
  table = FormatStatusTable({*back}, /*verbose=*/false);
  EXPECT_NE(table.find("HIT RATIO counts the reads the daemon sees"), std::string::npos) << table;
  s.read_mode = "passthrough";
  EXPECT_EQ(FormatStatusTable({s}, false).find("page cache"), std::string::npos);

  // Files counted from their closes (page-cache reads included): HIT RATIO
  // is the share read wholly from the cache, and the note is gone.
  s.read_mode = "cached";
  s.files_read_counted = true;
  s.files_read = 8;
  s.files_read_missed = 2;
  back = StatusFromJson(nlohmann::json::parse(StatusToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->files_read_counted);
  EXPECT_EQ(back->files_read, 8u);
  EXPECT_EQ(back->files_read_missed, 2u);
  EXPECT_EQ(back->hit_count(), 6u);
  EXPECT_EQ(back->read_count(), 8u);
  EXPECT_EQ(FormatStatusTable({*back}, false).find("page cache"), std::string::npos);
}

// Empty files are cached without the store holding them (IsCached says so);
// the counter-based figures count them from the snapshot, once per version.
TEST_F(StatusTest, EmptyFilesCountAsCachedAcrossASync) {
  Put("a/empty1", 0);
  Put("a/empty2", 0);
  Put("a/x", 5000);
  Put("b/y", 200'000);  // sparse: 4 blocks of 64 KiB
  Open();
  StatusReporter reporter(engine_, nullptr, "");
  DatasetStatus s = reporter.Compute();
  EXPECT_EQ(s.cached_files, 2u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.owned_cached_files, 2u);
  ExpectSameAsScan(s, ScanCachedFiles(*engine_, *snapshot_));

  ASSERT_TRUE(engine_->Fetch(*snapshot_->FindPath("b/y")).ok());
  s = reporter.Compute();
  EXPECT_EQ(s.cached_files, 3u);
  EXPECT_EQ(s.cached_bytes, 200'000u);
  ASSERT_TRUE(engine_->Fetch(*snapshot_->FindPath("a/x")).ok());
  s = reporter.Compute();
  EXPECT_EQ(s.cached_files, 4u);
  EXPECT_EQ(s.cached_bytes, s.ufs_total_bytes);
  EXPECT_EQ(s.cached_ratio, 1.0);

  // A sync that removes an empty file, adds two and drops a cached one: the
  // next call lists the new version's empty files.
  ufs_->Remove("ds/a/empty1");
  ufs_->Put("ds/c/empty3", "");
  ufs_->Put("ds/c/empty4", "");
  ufs_->Remove("ds/a/x");
  ASSERT_TRUE(dataset_->Sync().ok());
  std::shared_ptr<const Snapshot> next = engine_->snapshot();
  s = reporter.Compute();
  EXPECT_EQ(s.ufs_files, 4u);
  EXPECT_EQ(s.cached_files, 4u);  // empty2, empty3, empty4, b/y (b/y's object stayed)
  EXPECT_EQ(s.cached_bytes, 200'000u);
  EXPECT_EQ(s.cached_ratio, 1.0);
  ExpectSameAsScan(s, ScanCachedFiles(*engine_, *next));
}

// The store holding an object the snapshot does not list (a crash between a
// sync's switch and its removal of stale objects) must not push CACHED past
// UFS TOTAL: the call falls back to asking about every file.
TEST_F(StatusTest, ObjectsTheSnapshotDoesNotListNeverExceedTheTotal) {
  Put("a", 3000);
  Put("b", 4000);
  Open();
  StatusReporter reporter(engine_, nullptr, "");
  ASSERT_TRUE(engine_->Fetch(*snapshot_->FindPath("a")).ok());
  ASSERT_TRUE(engine_->Fetch(*snapshot_->FindPath("b")).ok());
  const ObjectKey a = engine_->KeyOf(*snapshot_->Get(*snapshot_->FindPath("a")));
  ObjectKey old_version = a;
  old_version.etag = "an-older-etag";
  ASSERT_TRUE(store_->AdmitObject(old_version, std::string(a.size, 'o')).value());
  EXPECT_EQ(store_->stats().complete_objects, 3u);
  DatasetStatus s = reporter.Compute();
  EXPECT_EQ(s.cached_files, 2u);
  EXPECT_EQ(s.cached_bytes, 7000u);
  EXPECT_EQ(s.cached_ratio, 1.0);
  ExpectSameAsScan(s, ScanCachedFiles(*engine_, *snapshot_));
}

// This node is the primary owner of even blocks only; never asked to read.
class EvenBlocksCluster : public ClusterSource {
 public:
  std::string_view name() const override { return "even-blocks"; }
  bool Owns(const ObjectKey&, uint64_t block) const override { return block % 2 == 0; }
  bool IsPrimary(const ObjectKey& key, uint64_t block) const override { return Owns(key, block); }
  Result<BlockData> ReadFromOwner(const BlockRef&, Priority, bool*) override {
    return NotFound("not in this test");
  }
  Result<bool> WarmRemote(const ObjectKey&) override { return NotFound("not in this test"); }
};

// owned_block_bytes counts the cached blocks of files no node holds whole
// (a cluster places a large file block by block), at their primary owner only.
TEST_F(StatusTest, OwnedBlockBytesCountBlocksOfPartlyCachedFiles) {
  Put("big", 200'000);  // 4 blocks of 64 KiB
  Put("small", 3000);
  Open();
  StatusReporter reporter(engine_, nullptr, "");
  ASSERT_TRUE(engine_->Fetch(*snapshot_->FindPath("small")).ok());
  const ObjectKey big = engine_->KeyOf(*snapshot_->Get(*snapshot_->FindPath("big")));
  const uint64_t bs = 64 << 10;
  for (uint64_t b : {1, 2}) {
    ASSERT_TRUE(store_->AdmitBlock(big, b, std::string(bs, 'b')).value());
  }
  DatasetStatus s = reporter.Compute();
  EXPECT_EQ(s.cached_files, 1u);
  EXPECT_EQ(s.cached_bytes, 3000u);
  EXPECT_EQ(s.owned_block_bytes, 3000u + 2 * bs);  // a single node owns every block

  // In a cluster: the blocks this node is the primary owner of (block 0 of
  // the small file, block 2 of the big one).
  engine_->SetCluster(std::make_shared<EvenBlocksCluster>());
  s = reporter.Compute();
  EXPECT_EQ(s.owned_block_bytes, 3000u + bs);
  auto back = StatusFromJson(nlohmann::json::parse(StatusToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->owned_block_bytes, 3000u + bs);
  engine_->SetCluster(nullptr);
  EXPECT_EQ(reporter.Compute().owned_block_bytes, 3000u + 2 * bs);
}

TEST_F(StatusTest, OriginErrorsMakeItDegraded) {
  Put("a", 10);
  Open();
  StatusReporter reporter(engine_, nullptr, "");
  EXPECT_EQ(reporter.Compute().phase, "Ready");
  ufs_->SetReadHook([](std::string_view, uint64_t) { return Unavailable("injected"); });
  EXPECT_FALSE(engine_->Fetch(*snapshot_->FindPath("a")).ok());
  DatasetStatus s = reporter.Compute();
  EXPECT_EQ(s.phase, "Degraded");
  EXPECT_EQ(s.origin_errors, 1u);
  EXPECT_EQ(engine_->stats().origin_errors_by_code[static_cast<int>(Code::kUnavailable)], 1u);
}

TEST(StatusFormat, FluidSizes) {
  EXPECT_EQ(FluidSize(0), "0B");
  EXPECT_EQ(FluidSize(1023), "1023B");
  EXPECT_EQ(FluidSize(1536), "1.50KiB");
  EXPECT_EQ(FluidSize(3ull << 30), "3.00GiB");
  EXPECT_FALSE(StatusFromJson(nlohmann::json::parse(R"({"name": 3})")).ok());
}

}  // namespace
}  // namespace granary
