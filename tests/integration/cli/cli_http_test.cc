// `granary` and the HTTP connector against a real nginx on loopback: ranged
// reads byte-exact, size from HEAD, listing refused clearly, 404s, and a
// killed server giving a clear error instead of a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "nginx_server.h"
#include "ufs/http_ufs.h"

namespace granary::testing {
namespace {

class CliHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    files_ = new std::vector<std::pair<std::string, std::string>>{
        {"train/n01/a.JPEG", RandomBytes(110'000, 11)},
        {"train/n01/empty.JPEG", ""},
        {"big.bin", RandomBytes(5 * 1024 * 1024 + 3, 12)},
        {"dir with space/x y.JPEG", RandomBytes(4097, 13)},
        {"nohead/f.bin", RandomBytes(12345, 14)},
        {"nohead/empty", ""},
    };
    for (const auto& [rel, data] : *files_) dir_->Write(rel, data);
    auto server = NginxServer::Start(dir_->path());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;  // stops nginx
    delete files_;
    delete dir_;
  }

  static std::string Url(const std::string& rel) { return server_->url() + "/" + rel; }

  static TempDir* dir_;
  static std::vector<std::pair<std::string, std::string>>* files_;
  static NginxServer* server_;
};

TempDir* CliHttpTest::dir_ = nullptr;
std::vector<std::pair<std::string, std::string>>* CliHttpTest::files_ = nullptr;
NginxServer* CliHttpTest::server_ = nullptr;

TEST_F(CliHttpTest, CatIsByteExactForEveryFile) {
  for (const auto& [rel, data] : *files_) {
    auto r = RunGranary({"cat", Url(rel)});
    ASSERT_EQ(r.exit_code, 0) << rel << ": " << r.err;
    EXPECT_TRUE(r.out == data) << rel << ": got " << r.out.size() << " bytes, want " << data.size();
  }
  auto r = RunGranary({"cat", "--chunk-size", "100000", Url("big.bin")});  // 53 ranged GETs
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == (*files_)[2].second);
}

TEST_F(CliHttpTest, RangedReadsAreByteExact) {
  auto uri = ParseUri(server_->url());
  ASSERT_TRUE(uri.ok());
  auto ufs = NewHttpUfs(*uri, {});
  ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();
  const std::string& big = (*files_)[2].second;
  for (uint64_t offset :
       {uint64_t{0}, uint64_t{1}, uint64_t{65535}, uint64_t{4'000'000}, uint64_t{big.size() - 1}}) {
    auto got = (*ufs)->ReadRange("big.bin", offset, 70'000);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == big.substr(offset, 70'000)) << "offset " << offset;
  }
  auto past = (*ufs)->ReadRange("big.bin", big.size() + 100, 10);
  ASSERT_TRUE(past.ok()) << past.status().ToString();
  EXPECT_TRUE(past->empty());
  auto info = (*ufs)->Stat("dir with space/x y.JPEG");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 4097u);
}

TEST_F(CliHttpTest, StatTakesSizeAndMtimeFromHead) {
  auto r = RunGranary({"stat", "--json", Url("train/n01/a.JPEG")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["size"], 110'000);
  EXPECT_FALSE(j["etag"].get<std::string>().empty());
  struct stat st {};
  ASSERT_EQ(::stat((dir_->path() + "/train/n01/a.JPEG").c_str(), &st), 0);
  EXPECT_EQ(j["mtime_ns"].get<int64_t>(), int64_t{st.st_mtim.tv_sec} * 1'000'000'000);
}

TEST_F(CliHttpTest, StatWorksWhenHeadIsRefused) {
  for (const auto& [rel, size] : {std::pair{"nohead/f.bin", 12345}, std::pair{"nohead/empty", 0}}) {
    auto r = RunGranary({"stat", "--json", Url(rel)});
    ASSERT_EQ(r.exit_code, 0) << rel << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["size"], size) << rel;
  }
}

TEST_F(CliHttpTest, ListingIsRefusedClearly) {
  auto r = RunGranary({"ls", server_->url() + "/train/"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, server_->url() + "/train/",
                          "listing is not supported over HTTP (use s3:// or a path)"))
      << r.err;
}

TEST_F(CliHttpTest, MissingObjectIsNotFound) {
  auto r = RunGranary({"cat", Url("train/nope.JPEG")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, Url("train/nope.JPEG"), "not found (HTTP 404)")) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliHttpTest, ServerErrorsAreRetriedThenReported) {
  auto r = RunGranary({"cat", server_->url() + "/status/503"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, server_->url() + "/status/503",
                          "server failed after 4 attempts (HTTP 503)"))
      << r.err;
  r = RunGranary({"stat", server_->url() + "/status/403"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, server_->url() + "/status/403", "access denied (HTTP 403)"))
      << r.err;
}

TEST(CliHttpKillTest, KilledServerGivesAClearErrorNotAHang) {
  TempDir dir;
  dir.Write("f", "hello");
  auto server = NginxServer::Start(dir.path());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string url = (*server)->url() + "/f";
  auto r = RunGranary({"cat", url});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello");
  (*server)->Kill();
  r = RunGranary({"cat", url});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, url, "server unreachable after 4 attempts")) << r.err;
}

}  // namespace
}  // namespace granary::testing
