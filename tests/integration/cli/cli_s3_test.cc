// `granary` against a real S3-compatible server (moto_server on loopback):
// `ls -r` lists exactly the server's objects, `cat` is byte-exact for every
// object, `stat`, --config mounts, missing bucket/key errors, a killed server.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "testing/moto_server.h"
#include "ufs/s3_ufs.h"

namespace granary::testing {
namespace {

constexpr char kBucket[] = "granary-cli";

// Credentials for moto (any key works), and nothing from the user's ~/.aws.
void SetTestEnvironment() {
  ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
  ::setenv("AWS_CONFIG_FILE", "/dev/null", 1);
  ::unsetenv("AWS_PROFILE");
  ::unsetenv("AWS_ENDPOINT_URL");
  ::unsetenv("AWS_SESSION_TOKEN");
}

Result<std::unique_ptr<UnderStorage>> OpenBucket(const std::string& endpoint, const char* bucket) {
  ASSIGN_OR_RETURN(Uri uri, ParseUri(std::string("s3://") + bucket));
  return NewS3Ufs(uri, UfsOptions{.options = {{"endpoint", endpoint}}});
}

class CliS3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetTestEnvironment();
    auto moto = MotoServer::Start();
    ASSERT_TRUE(moto.ok()) << moto.status().ToString();
    moto_ = moto->release();
    objects_ = new std::map<std::string, std::string>();
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 12; ++i) {
        std::string key = "data/train/n0" + std::to_string(c) + "/" + std::to_string(i) + ".JPEG";
        (*objects_)[key] =
            RandomBytes(static_cast<size_t>((i * 7919 + c * 104729) % 200'000), i + 100 * c);
      }
    }
    (*objects_)["data/big.bin"] = RandomBytes(2 * 1024 * 1024 + 5, 7);
    (*objects_)["data/empty"] = "";
    (*objects_)["data2/sibling"] = "not under data/";
    (*objects_)["other/x"] = "elsewhere";
    auto ufs = OpenBucket(moto_->endpoint(), kBucket);
    ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();
    auto* s3 = dynamic_cast<S3Ufs*>(ufs->get());
    ASSERT_NE(s3, nullptr);
    ASSERT_TRUE(s3->CreateBucket().ok());
    for (const auto& [key, data] : *objects_) {
      Status s = s3->PutObject(key, data);
      ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
    }
  }
  static void TearDownTestSuite() {
    delete objects_;
    delete moto_;  // stops moto_server
  }

  static ProcessResult Granary(std::vector<std::string> args) {
    args.insert(args.begin(), {"--endpoint", moto_->endpoint()});
    return RunGranary(args);
  }
  static std::string S3(const std::string& key) {
    return std::string("s3://") + kBucket + "/" + key;
  }

  static MotoServer* moto_;
  static std::map<std::string, std::string>* objects_;
};

MotoServer* CliS3Test::moto_ = nullptr;
std::map<std::string, std::string>* CliS3Test::objects_ = nullptr;

TEST_F(CliS3Test, RecursiveListingIsExactlyTheServersObjects) {
  auto r = Granary({"ls", "-r", S3("data")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> want;
  for (const auto& [key, data] : *objects_) {
    if (key.starts_with("data/")) want.push_back(key);
  }
  EXPECT_EQ(Lines(r.out), want);
  // -l shows each object's size.
  r = Granary({"ls", "-r", "-l", S3("data/")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), want.size());
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string mtime, key;
    uint64_t size = 0;
    in >> mtime >> size >> key;
    ASSERT_TRUE(objects_->count(key)) << line;
    EXPECT_EQ(size, objects_->at(key).size()) << line;
  }
}

TEST_F(CliS3Test, OneLevelListingShowsPrefixes) {
  auto r = Granary({"ls", S3("data/train")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.out), (std::vector<std::string>{"n00/", "n01/", "n02/"}));
}

TEST_F(CliS3Test, CatIsByteExactForEveryObject) {
  for (const auto& [key, data] : *objects_) {
    auto r = Granary({"cat", S3(key)});
    ASSERT_EQ(r.exit_code, 0) << key << ": " << r.err;
    EXPECT_TRUE(r.out == data) << key << ": got " << r.out.size() << " bytes, want " << data.size();
  }
  auto r = Granary({"cat", "--chunk-size", "256KiB", S3("data/big.bin")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == objects_->at("data/big.bin"));
}

TEST_F(CliS3Test, StatShowsSizeAndEtag) {
  auto r = Granary({"stat", "--json", S3("data/big.bin")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["key"], "data/big.bin");
  EXPECT_EQ(j["size"], 2 * 1024 * 1024 + 5);
  EXPECT_EQ(j["etag"].get<std::string>().size(), 32u);  // MD5 of a single PUT
  EXPECT_GT(j["mtime_ns"].get<int64_t>(), 0);
}

TEST_F(CliS3Test, ConfigMountSuppliesTheEndpoint) {
  TempDir dir;
  std::ofstream(dir.path() + "/granary.yaml")
      << "dataset:\n  mounts:\n    - mountPoint: " << S3("data") << "\n      options:\n"
      << "        endpoint: " << moto_->endpoint() << "\n";
  auto r = RunGranary({"ls", S3("data/train/n01/"), "--config", dir.path() + "/granary.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 12u);
}

TEST_F(CliS3Test, MissingBucketAndKeyGiveOneErrorLine) {
  auto r = Granary({"ls", "s3://granary-nope/x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "granary: s3://granary-nope/x: bucket does not exist (404 NoSuchBucket)\n");
  r = Granary({"cat", S3("data/nope.JPEG")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, S3("data/nope.JPEG"), "NoSuchKey")) << r.err;
  r = Granary({"stat", "s3://Bad_Bucket/x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsErrorLine(r.err, "s3://Bad_Bucket/x", "invalid bucket name")) << r.err;
}

TEST(CliS3KillTest, KilledServerGivesAClearErrorNotAHang) {
  SetTestEnvironment();
  auto moto = MotoServer::Start();
  ASSERT_TRUE(moto.ok()) << moto.status().ToString();
  const std::string endpoint = (*moto)->endpoint();
  (*moto)->Kill();
  auto r = RunGranary({"--endpoint", endpoint, "ls", "-r", "s3://granary-gone/x"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsErrorLine(r.err, "s3://granary-gone/x", "unreachable")) << r.err;
}

// A whole session — listing, reading, stat, a mount with its log at
// debug level, status JSON, the metrics page, a failed command with
// credentials in the endpoint — never shows a secret value.
TEST_F(CliS3Test, SecretsNeverAppearInLogsErrorsStatusOrMetrics) {
  const std::vector<std::string> secrets = {"AKIAGRANARYSECRET0001", "granary-secret-value-9d3f",
                                            "granary-session-token-77aa", "hunter2pass"};
  ::setenv("AWS_ACCESS_KEY_ID", secrets[0].c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", secrets[1].c_str(), 1);
  ::setenv("AWS_SESSION_TOKEN", secrets[2].c_str(), 1);
  std::string seen;  // every byte the session showed a user
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--log-level", "debug"});
    ProcessResult r = Granary(args);
    seen += r.out + r.err;
    return r;
  };
  EXPECT_EQ(run({"ls", "-r", S3("data")}).exit_code, 0);
  EXPECT_EQ(run({"cat", S3("data/train/n00/1.JPEG")}).exit_code, 0);
  EXPECT_EQ(run({"stat", S3("data/big.bin"), "--json"}).exit_code, 0);
  // Credentials in an endpoint are refused without being echoed.
  ProcessResult bad = RunGranary({"--log-level", "debug", "--endpoint",
                                  "http://user:" + secrets[3] + "@127.0.0.1:1", "ls", S3("data")});
  seen += bad.out + bad.err;
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("credentials in the URL"), std::string::npos) << bad.err;

  if (::geteuid() == 0 && ::access("/dev/fuse", R_OK | W_OK) == 0) {
    TempDir dir;
    const std::string mnt = dir.path() + "/mnt", run_dir = dir.path() + "/run";
    std::filesystem::create_directories(mnt);
    auto port = FreeLoopbackPort();
    ASSERT_TRUE(port.ok());
    ProcessResult m = run({"mount", S3("data"), mnt, "--cache-dir", dir.path() + "/cache:1G",
                           "--run-dir", run_dir, "--log-file", dir.path() + "/daemon.log",
                           "--metrics-addr", "127.0.0.1:" + std::to_string(*port)});
    ASSERT_EQ(m.exit_code, 0) << m.err;
    for (const auto& [key, data] : *objects_) {
      if (!key.starts_with("data/")) continue;
      std::ifstream in(mnt + "/" + key.substr(5), std::ios::binary);
      std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_EQ(got.size(), data.size()) << key;
    }
    ProcessResult st = run({"status", mnt, "--json", "--run-dir", run_dir});
    EXPECT_EQ(st.exit_code, 0) << st.err;
    ProcessResult metrics = RunProcess(
        {"/usr/bin/curl", "-s", "http://127.0.0.1:" + std::to_string(*port) + "/metrics"});
    EXPECT_NE(metrics.out.find("granary_"), std::string::npos);
    seen += metrics.out;
    EXPECT_EQ(run({"umount", mnt, "--run-dir", run_dir}).exit_code, 0);
    std::ifstream log(dir.path() + "/daemon.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(text.empty());
    seen += text;
    for (const auto& entry : std::filesystem::directory_iterator(run_dir)) {
      if (entry.path().extension() != ".json") continue;  // the stats file
      std::ifstream f(entry.path());
      seen += std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    }
  }
  SetTestEnvironment();
  for (const std::string& secret : secrets) {
    EXPECT_EQ(seen.find(secret), std::string::npos) << "secret shown: " << secret;
  }
  EXPECT_GT(seen.size(), 1000u);  // the session did show something
}

}  // namespace
}  // namespace granary::testing
