// LoadJob / LoadManager: loads what was asked, reports what did not fit, what
// is missing and what failed, and allows one load at a time.
#include "control/loader.h"

#include <future>

#include "control/control.h"
#include "testing/dataset_fixture.h"

namespace granary {
namespace {

class LoaderTest : public DatasetFixture {
 protected:
  void MakeDataset(int classes, int per_class, size_t size = 3000) {
    for (int c = 0; c < classes; ++c) {
      for (int i = 0; i < per_class; ++i) {
        Put("train/n" + std::to_string(c) + "/" + std::to_string(i) + ".JPEG", size + i);
      }
    }
    Put("val/x.JPEG", 100'000);  // larger than a block: cached block by block
  }

  LoadResult Load(const LoadRequest& req) {
    LoadManager mgr(engine_);
    auto job = mgr.Start(req);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    if (!job.ok()) return {};
    return (*job)->Wait();
  }
};

TEST_F(LoaderTest, LoadsEverythingThenReadsNeedNoOrigin) {
  MakeDataset(10, 30);
  Open();
  LoadResult r = Load({.threads = 16});
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.files_requested, sizes_.size());
  EXPECT_EQ(r.files_cached, sizes_.size());
  EXPECT_EQ(r.bytes_cached, total_bytes_);
  EXPECT_EQ(r.files_not_fitted, 0u);
  EXPECT_EQ(r.files_failed, 0u);

  uint64_t origin_before = engine_->stats().origin_requests;
  std::string buf(200'000, '\0');
  snapshot_->ForEachFile([&](const EntryView& e) {
    auto n = engine_->Read(e.ino, 0, std::span<char>(buf.data(), buf.size()));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, e.size);
  });
  EXPECT_EQ(engine_->stats().origin_requests, origin_before);

  // A second run resumes: everything is skipped, nothing fetched.
  LoadManager mgr(engine_);
  auto job = mgr.Start({.threads = 4});
  ASSERT_TRUE(job.ok());
  LoadResult again = (*job)->Wait();
  EXPECT_TRUE(again.complete());
  EXPECT_EQ((*job)->progress().files_skipped, sizes_.size());
  EXPECT_EQ(engine_->stats().origin_requests, origin_before);
}

TEST_F(LoaderTest, PaddleClasListLoadsExactlyThoseFiles) {
  MakeDataset(4, 10);
  Open();
  std::vector<std::string> lines = {"train/n0/1.JPEG 0",
                                    "train/n0/2.JPEG 0",
                                    "train/n3/9.JPEG 3",
                                    "ds/train/n1/4.JPEG 1",  // with the origin prefix
                                    "",
                                    "train/n9/0.JPEG 9",
                                    "train/nope.JPEG 1"};
  LoadResult r = Load({.list_lines = lines, .threads = 4});
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.files_requested, 4u);
  EXPECT_EQ(r.files_cached, 4u);
  EXPECT_EQ(r.missing, 2u);
  EXPECT_EQ(r.missing_paths, (std::vector<std::string>{"train/n9/0.JPEG", "train/nope.JPEG"}));
  uint64_t cached = 0;
  snapshot_->ForEachFile([&](const EntryView& e) { cached += engine_->IsCached(e.ino); });
  EXPECT_EQ(cached, 4u);
  EXPECT_TRUE(engine_->IsCached(*snapshot_->FindPath("train/n1/4.JPEG")));
}

TEST_F(LoaderTest, ListLinesRelativeToSubdirectory) {
  MakeDataset(2, 5);
  Open();
  LoadResult r = Load({.path = "train", .list_lines = {"n1/2.JPEG 1", "train/n0/0.JPEG 0"}});
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.files_cached, 2u);
}

TEST_F(LoaderTest, SubdirectoryOnly) {
  MakeDataset(3, 5);
  Open();
  LoadResult r = Load({.path = "/train/n2/"});
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.files_requested, 5u);
  EXPECT_FALSE(engine_->IsCached(*snapshot_->FindPath("train/n1/0.JPEG")));
  LoadManager mgr(engine_);
  auto bad = mgr.Start({.path = "train/nope"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train/nope"), std::string::npos);
}

TEST_F(LoaderTest, CacheSmallerThanDatasetReportsWhatDidNotFit) {
  MakeDataset(4, 25, 8000);  // ~800 KB in 8 KiB allocations
  Open(/*quota=*/400 << 10);
  LoadResult r = Load({.threads = 8});
  EXPECT_FALSE(r.complete());
  EXPECT_GT(r.files_cached, 0u);
  EXPECT_GT(r.files_not_fitted, 0u);
  EXPECT_EQ(r.files_cached + r.files_not_fitted, r.files_requested);
  EXPECT_EQ(r.bytes_cached + r.bytes_not_fitted, total_bytes_);
  uint64_t cached = 0;
  snapshot_->ForEachFile([&](const EntryView& e) { cached += engine_->IsCached(e.ino); });
  EXPECT_EQ(cached, r.files_cached);
}

TEST_F(LoaderTest, OriginFailuresNamePaths) {
  MakeDataset(2, 5);
  Open();
  ufs_->SetReadHook([](std::string_view key, uint64_t) {
    return key.ends_with("n1/3.JPEG") ? Unavailable("injected 503") : Status::Ok();
  });
  LoadResult r = Load({.threads = 4});
  EXPECT_EQ(r.files_failed, 1u);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].path, "train/n1/3.JPEG");
  EXPECT_NE(r.failures[0].reason.find("injected 503"), std::string::npos);
  EXPECT_EQ(r.files_cached, r.files_requested - 1);
}

TEST_F(LoaderTest, SecondConcurrentLoadIsRefusedAndCancelStops) {
  MakeDataset(2, 20);
  Open();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ufs_->SetReadHook([released](std::string_view, uint64_t) {
    released.wait();
    return Status::Ok();
  });
  LoadManager mgr(engine_);
  auto first = mgr.Start({.threads = 2});
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(mgr.loading());
  auto second = mgr.Start({.threads = 2});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_NE(second.status().message().find("already running"), std::string::npos);
  EXPECT_TRUE(mgr.Cancel().ok());
  release.set_value();
  LoadResult r = (*first)->Wait();
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.complete());
  EXPECT_GT(r.files_not_loaded, 0u);
  EXPECT_FALSE(mgr.loading());
  EXPECT_EQ(mgr.Cancel().code(), Code::kNotFound);
}

TEST_F(LoaderTest, CheckOnlyFetchesNothing) {
  MakeDataset(2, 5);
  Open();
  LoadResult r = Load({.check_only = true});
  EXPECT_EQ(r.files_cached, 0u);
  EXPECT_EQ(r.files_not_loaded, r.files_requested);
  EXPECT_EQ(engine_->stats().origin_requests, 0u);
}

// `granary load` prints what the daemon's JSON says, including from a daemon
// started before the one load-result type (the paths as "missing").
TEST(LoadResultJson, RoundTripsAndReadsAnOlderDaemonsReply) {
  LoadResult r{.files_requested = 3,
               .files_cached = 2,
               .failures = {{.path = "a", .reason = "gone"}},
               .missing = 4,
               .missing_paths = {"x", "y"}};
  LoadResult back = LoadResultFromJson(LoadResultToJson(r));
  EXPECT_EQ(back.files_requested, 3u);
  EXPECT_EQ(back.missing, 4u);
  EXPECT_EQ(back.missing_paths, (std::vector<std::string>{"x", "y"}));
  ASSERT_EQ(back.failures.size(), 1u);
  EXPECT_EQ(back.failures[0].reason, "gone");
  EXPECT_FALSE(back.complete());

  auto older = nlohmann::json::parse(
      R"({"files_requested":2,"files_cached":2,"missing_count":5,"missing":["p"]})");
  LoadResult old = LoadResultFromJson(older);
  EXPECT_EQ(old.missing, 5u);
  EXPECT_EQ(old.missing_paths, std::vector<std::string>{"p"});
  EXPECT_EQ(LoadResultFromJson(nlohmann::json()).files_requested, 0u);  // no result at all
}

}  // namespace
}  // namespace granary
