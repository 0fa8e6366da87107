// `granary` against file:// paths: listing, byte-exact cat, stat, errors,
// usage errors and --help on every verb.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace granary::testing {
namespace {

class CliFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    files_ = {
        {"train/n01/a.JPEG", RandomBytes(110'000, 1)},
        {"train/n01/b.JPEG", RandomBytes(0, 2)},
        {"train/n02/c.JPEG", RandomBytes(3 * 1024 * 1024 + 7, 3)},
        {"train-list.txt", "train/n01/a.JPEG\n"},
        {"val/with space.JPEG", RandomBytes(1, 4)},
    };
    for (const auto& [rel, data] : files_) dir_.Write(rel, data);
  }

  std::string Path(const std::string& rel = "") const { return dir_.path() + "/" + rel; }

  TempDir dir_;
  std::vector<std::pair<std::string, std::string>> files_;
};

TEST_F(CliFileTest, RecursiveListingShowsEveryFileSorted) {
  auto r = RunGranary({"ls", "-r", dir_.path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> want;
  for (const auto& [rel, data] : files_) want.push_back(Path(rel));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Lines(r.out), want);
  EXPECT_EQ(r.err, "");
}

TEST_F(CliFileTest, ListingOneLevelShowsDirectoriesAndFiles) {
  auto r = RunGranary({"ls", "file://" + dir_.path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.out), (std::vector<std::string>{"train/", "val/", "train-list.txt"}));
  r = RunGranary({"ls", Path("train/n01/")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.out), (std::vector<std::string>{"a.JPEG", "b.JPEG"}));
}

TEST_F(CliFileTest, LongListingHasMtimeSizeAndName) {
  auto r = RunGranary({"ls", "-l", Path("train/n02")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  std::istringstream in(lines[0]);
  std::string mtime, size, name;
  in >> mtime >> size >> name;
  EXPECT_EQ(mtime.size(), 20u) << mtime;  // 2024-05-01T12:00:00Z
  EXPECT_EQ(mtime.back(), 'Z');
  EXPECT_EQ(size, std::to_string(3 * 1024 * 1024 + 7));
  EXPECT_EQ(name, "c.JPEG");
}

TEST_F(CliFileTest, CatIsByteExactForEveryFile) {
  for (const auto& [rel, data] : files_) {
    auto r = RunGranary({"cat", Path(rel)});
    ASSERT_EQ(r.exit_code, 0) << rel << ": " << r.err;
    EXPECT_TRUE(r.out == data) << rel << ": got " << r.out.size() << " bytes, want " << data.size();
  }
  // Small chunks: many reads in flight, each placed at the right offset.
  for (const char* parallel : {"1", "4", "16"}) {
    auto r = RunGranary(
        {"cat", "--chunk-size", "64KiB", "--parallel", parallel, Path("train/n02/c.JPEG")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(r.out == files_[2].second) << "parallel " << parallel;
  }
  auto r = RunGranary({"cat", "--parallel", "0", Path("train/n02/c.JPEG")});
  EXPECT_EQ(r.exit_code, 2);
  // Several objects in a row.
  r = RunGranary({"cat", Path("train-list.txt"), Path("val/with space.JPEG")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == files_[3].second + files_[4].second);
}

TEST_F(CliFileTest, StatShowsSizeMtimeEtag) {
  auto r = RunGranary({"stat", "--json", Path("train/n01/a.JPEG")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["size"], 110'000);
  struct stat st {};
  ASSERT_EQ(::stat(Path("train/n01/a.JPEG").c_str(), &st), 0);
  EXPECT_EQ(j["mtime_ns"].get<int64_t>(),
            int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec);
  EXPECT_EQ(j["etag"], std::to_string(j["mtime_ns"].get<int64_t>()) + "-110000");
  r = RunGranary({"stat", Path("train/n01/a.JPEG")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("size:  110000"), std::string::npos) << r.out;
}

TEST_F(CliFileTest, MissingPathsGiveOneErrorLine) {
  auto r = RunGranary({"cat", Path("missing.JPEG")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, Path("missing.JPEG"), "No such file or directory")) << r.err;
  EXPECT_EQ(r.out, "");
  r = RunGranary({"ls", Path("missing")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, Path("missing"), "no such object or prefix")) << r.err;
  r = RunGranary({"stat", Path("train")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, Path("train"), "is a directory")) << r.err;
}

TEST_F(CliFileTest, EmptyDirectoryListsNothing) {
  std::filesystem::create_directory(Path("empty"));
  auto r = RunGranary({"ls", Path("empty")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliFileTest, UsageErrorsExitTwo) {
  auto r = RunGranary({"ls", "s3:///nobucket"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsErrorLine(r.err, "s3:///nobucket", "missing bucket name")) << r.err;
  r = RunGranary({"cat", "ftp://host/x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsErrorLine(r.err, "ftp://host/x", "unsupported scheme 'ftp'")) << r.err;
  r = RunGranary({"ls"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  r = RunGranary({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsErrorLine(r.err, "frobnicate", "unknown command")) << r.err;
  r = RunGranary({"ls", "--endpoint", "http://127.0.0.1:1", dir_.path()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--endpoint applies to s3:// URIs only"), std::string::npos) << r.err;
}

TEST_F(CliFileTest, EveryVerbHasHelp) {
  for (const char* verb : {"ls", "cat", "stat", "version"}) {
    auto r = RunGranary({verb, "--help"});
    EXPECT_EQ(r.exit_code, 0) << verb;
    EXPECT_NE(r.out.find(std::string("Usage: granary ") + verb), std::string::npos) << r.out;
  }
  auto r = RunGranary({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* verb : {"ls", "cat", "stat", "version"}) {
    EXPECT_NE(r.out.find(verb), std::string::npos) << r.out;
  }
}

TEST_F(CliFileTest, VersionPrintsTheBuiltVersion) {
  auto r = RunGranary({"version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string("granary ") + GRANARY_VERSION + "\n");
}

}  // namespace
}  // namespace granary::testing
