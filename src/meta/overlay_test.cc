// Overlay against a real local origin (a directory): staging with any write
// pattern, uploads that replace the object whole, recovery of what a crash
// left staged, the quota, deletes, and folding into a new snapshot.
#include "meta/overlay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "ufs/open.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class OverlayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary-overlay-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/origin");
    auto ufs = OpenUnderStorage(*ParseUri(dir_ + "/origin"), {});
    ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();
    ufs_ = std::move(*ufs);
  }
  void TearDown() override { fs::remove_all(dir_); }
  OverlayOptions Opts(uint64_t quota = 1 << 30) {
    return OverlayOptions{
        .staging_dir = dir_ + "/staging", .prefix = dir_.substr(1) + "/origin/", .quota = quota};
  }
  std::string Origin(const std::string& rel) { return dir_ + "/origin/" + rel; }

  std::string dir_;
  std::shared_ptr<UnderStorage> ufs_;
};

TEST_F(OverlayTest, AnyWritePatternIsStagedAndUploadedWhole) {
  auto o = Overlay::Open(Opts(), ufs_);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  Overlay& ov = **o;
  ASSERT_TRUE(ov.Mkdir("ckpt").ok());
  ASSERT_TRUE(ov.Create("ckpt/model.pt").ok());
  std::string model(3 << 20, '\0');
  std::mt19937 rng(1);
  for (char& c : model) c = static_cast<char>(rng());
  // Out of order, overlapping, then truncated.
  ASSERT_TRUE(ov.Write("ckpt/model.pt", 1 << 20, std::span(model).subspan(1 << 20)).ok());
  ASSERT_TRUE(ov.Write("ckpt/model.pt", 0, std::span(model).first(1 << 20)).ok());
  ASSERT_TRUE(ov.Write("ckpt/model.pt", 100, std::span<const char>("XYZ", 3)).ok());
  model.replace(100, 3, "XYZ");
  ASSERT_TRUE(ov.Truncate("ckpt/model.pt", model.size() - 10).ok());
  model.resize(model.size() - 10);
  EXPECT_FALSE(fs::exists(Origin("ckpt/model.pt")));  // nothing at the origin before the commit
  EXPECT_EQ(ov.stats().pending_files, 1u);
  ASSERT_TRUE(ov.Commit("ckpt/model.pt").ok());
  EXPECT_EQ(Slurp(Origin("ckpt/model.pt")), model);
  OverlayStats st = ov.stats();
  EXPECT_EQ(st.pending_files, 0u);
  EXPECT_EQ(st.uploads, 1u);
  EXPECT_EQ(st.uploaded_bytes, model.size());
  // Read back from the staged copy.
  std::string back(model.size(), '\0');
  auto n = ov.Read("ckpt/model.pt", 0, std::span(back));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(back, model);
  // A commit without changes uploads nothing.
  ASSERT_TRUE(ov.Commit("ckpt/model.pt").ok());
  EXPECT_EQ(ov.stats().uploads, 1u);
  // Appends re-upload the whole file.
  ASSERT_TRUE(ov.Write("ckpt/model.pt", model.size(), std::span<const char>("end", 3)).ok());
  ASSERT_TRUE(ov.Commit("ckpt/model.pt").ok());
  EXPECT_EQ(Slurp(Origin("ckpt/model.pt")), model + "end");
  auto kids = ov.Children("ckpt");
  ASSERT_EQ(kids.size(), 1u);
  EXPECT_EQ(kids["model.pt"].size, model.size() + 3);
  EXPECT_TRUE(ov.Children("")["ckpt"].is_dir);
  // Unlink removes the object at the origin too.
  ASSERT_TRUE(ov.Unlink("ckpt/model.pt").ok());
  EXPECT_FALSE(fs::exists(Origin("ckpt/model.pt")));
  EXPECT_FALSE(ov.Get("ckpt/model.pt").has_value());
  EXPECT_TRUE(ov.Rmdir("ckpt").ok());
}

TEST_F(OverlayTest, WhatACrashLeftStagedIsUploadedByTheNextOpenOnlyIfItsWriterHadClosedIt) {
  {
    auto o = Overlay::Open(Opts(), ufs_);
    ASSERT_TRUE(o.ok());
    // Closed by its writer, but the upload failed (the origin's "log" is a file).
    std::ofstream(Origin("log")) << "in the way";
    ASSERT_TRUE((*o)->Create("log/workerlog.0").ok());
    ASSERT_TRUE((*o)->Write("log/workerlog.0", 0, std::span<const char>("line 1\n", 7)).ok());
    EXPECT_FALSE((*o)->Commit("log/workerlog.0").ok());
    // Still being written when the daemon dies: never closed.
    ASSERT_TRUE((*o)->Create("b.txt").ok());
    ASSERT_TRUE((*o)->Write("b.txt", 0, std::span<const char>("bbb", 3)).ok());
    EXPECT_EQ((*o)->stats().unclosed_files, 1u);
    // Destroyed here: as after kill -9.
  }
  fs::remove(Origin("log"));
  // A temporary name an interrupted POSIX upload left beside the target.
  fs::create_directories(Origin("log"));
  std::ofstream(Origin("log/.workerlog.0.granary-1-abc")) << "partial";
  {
    auto o = Overlay::Open(Opts(), ufs_);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ((*o)->stats().pending_files, 2u);
    EXPECT_EQ((*o)->stats().pending_bytes, 10u);
    EXPECT_EQ((*o)->stats().unclosed_files, 1u);
    ASSERT_TRUE((*o)->RecoverPending().ok());
    EXPECT_EQ(Slurp(Origin("log/workerlog.0")), "line 1\n");
    EXPECT_FALSE(fs::exists(Origin("log/.workerlog.0.granary-1-abc")));
    EXPECT_FALSE(fs::exists(Origin("b.txt")));  // a partial file never reaches the origin
    EXPECT_EQ((*o)->stats().pending_files, 1u);
    EXPECT_TRUE((*o)->Get("b.txt").has_value());  // still readable, still pending
  }
  {
    // Closing it again (through the mount: Commit) uploads it.
    auto o = Overlay::Open(Opts(), ufs_);
    ASSERT_TRUE(o.ok());
    ASSERT_TRUE((*o)->RecoverPending().ok());
    EXPECT_FALSE(fs::exists(Origin("b.txt")));
    ASSERT_TRUE((*o)->Commit("b.txt").ok());
    EXPECT_EQ(Slurp(Origin("b.txt")), "bbb");
    ASSERT_TRUE((*o)->Create("c.txt").ok());
    ASSERT_TRUE((*o)->Write("c.txt", 0, std::span<const char>("c", 1)).ok());
  }
  OverlayOptions discard = Opts();
  discard.discard_pending = true;
  auto o = Overlay::Open(discard, ufs_);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o)->stats().pending_files, 0u);
  EXPECT_FALSE((*o)->Get("c.txt").has_value());
  EXPECT_TRUE((*o)->Get("b.txt").has_value());  // clean: still served from staging
  EXPECT_FALSE(fs::exists(Origin("c.txt")));
  // A sync that lists b.txt folds it away.
  (*o)->Fold([](const std::string& p) { return p == "b.txt" || p == "log/workerlog.0"; });
  EXPECT_FALSE((*o)->Get("b.txt").has_value());
  EXPECT_EQ((*o)->stats().files, 0u);
}

TEST_F(OverlayTest, TheQuotaRefusesGrowthWithNoSpaceAndAFailedUploadKeepsTheData) {
  auto o = Overlay::Open(Opts(/*quota=*/1000), ufs_);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE((*o)->Create("x").ok());
  std::string data(900, 'x');
  ASSERT_TRUE((*o)->Write("x", 0, std::span(data)).ok());
  auto r = (*o)->Write("x", 900, std::span(data).first(200));
  EXPECT_EQ(r.status().code(), Code::kNoSpace);
  EXPECT_EQ((*o)->Truncate("x", 2000).code(), Code::kNoSpace);
  ASSERT_TRUE((*o)->Write("x", 10, std::span(data).first(50)).ok());  // rewrites inside: fine

  // The origin refuses (its directory is now a file): EIO-class error, data kept, retried.
  ASSERT_TRUE((*o)->Create("sub/y").ok());
  ASSERT_TRUE((*o)->Write("sub/y", 0, std::span<const char>("yy", 2)).ok());
  std::ofstream(Origin("sub")) << "not a directory";
  Status s = (*o)->Commit("sub/y");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ((*o)->stats().upload_failures, 1u);
  EXPECT_EQ((*o)->stats().pending_files, 2u);
  fs::remove(Origin("sub"));
  ASSERT_TRUE((*o)->Commit("sub/y").ok());
  EXPECT_EQ(Slurp(Origin("sub/y")), "yy");
}

TEST_F(OverlayTest, ABrokenStagedFileDescriptionIsRemovedAndTheOthersLoad) {
  {
    auto o = Overlay::Open(Opts(), ufs_);
    ASSERT_TRUE(o.ok());
    ASSERT_TRUE((*o)->Create("good.txt").ok());
    ASSERT_TRUE((*o)->Write("good.txt", 0, std::span<const char>("ok", 2)).ok());
  }
  std::ofstream(dir_ + "/staging/77.meta") << "{not json";
  std::ofstream(dir_ + "/staging/77.data") << "junk";
  std::ofstream(dir_ + "/staging/78.meta") << R"({"v":1,"kind":"file","path":"no-data.txt"})";
  auto o = Overlay::Open(Opts(), ufs_);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE((*o)->Get("good.txt").has_value());
  EXPECT_FALSE((*o)->Get("no-data.txt").has_value());
  EXPECT_FALSE(fs::exists(dir_ + "/staging/77.meta"));
  EXPECT_FALSE(fs::exists(dir_ + "/staging/77.data"));
  EXPECT_FALSE(fs::exists(dir_ + "/staging/78.meta"));
  EXPECT_EQ((*o)->stats().pending_files, 1u);
}

}  // namespace
}  // namespace granary
