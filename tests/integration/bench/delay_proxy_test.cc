// Smoke tests of s3_delay_proxy in front of a real moto_server, driven by the
// project's S3 connector: bytes pass through intact, each request takes at
// least the configured delay, the bandwidth cap holds, and the proxy counts
// the requests it forwarded.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "bench_process.h"
#include "testing/moto_server.h"
#include "ufs/s3_ufs.h"

namespace granary::bench_test {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<char>(seed >> 56);
  }
  return out;
}

std::unique_ptr<S3Ufs> ClientFor(const std::string& endpoint, const std::string& bucket) {
  S3Options o;
  o.endpoint = endpoint;
  o.credentials = {.access_key_id = "test", .secret_access_key = "test"};
  return std::make_unique<S3Ufs>(bucket, o);
}

class DelayProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto moto = testing::MotoServer::Start();
    if (!moto.ok()) GTEST_SKIP() << "no S3 server for this test: " << moto.status().ToString();
    moto_ = std::move(*moto);
  }

  // Starts a proxy in front of moto with extra flags; returns its endpoint.
  std::string StartProxy(std::vector<std::string> flags) {
    std::vector<std::string> argv = {PROXY_PATH, "--upstream", moto_->endpoint(), "--port", "0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto proxy = Background::Start(argv);
    EXPECT_TRUE(proxy.ok()) << proxy.status().ToString();
    if (!proxy.ok()) return "";
    proxy_ = std::move(*proxy);
    return "http://127.0.0.1:" + proxy_->first_line();
  }

  std::unique_ptr<testing::MotoServer> moto_;
  std::unique_ptr<Background> proxy_;
};

TEST_F(DelayProxyTest, PassesBytesIntactAndDelaysEachRequest) {
  std::string endpoint = StartProxy({"--delay", "60ms"});
  ASSERT_FALSE(endpoint.empty());
  auto s3 = ClientFor(endpoint, "delayed");
  ASSERT_TRUE(s3->CreateBucket().ok());
  std::string data = RandomBytes(300'000, 42);
  ASSERT_TRUE(s3->PutObject("dir/object.bin", data).ok());

  auto start = SteadyClock::now();
  auto info = s3->Stat("dir/object.bin");
  auto elapsed = SteadyClock::now() - start;
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, data.size());
  EXPECT_GE(elapsed, milliseconds(60));  // lower bound only

  auto read = s3->ReadRange("dir/object.bin", 0, data.size());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(*read == data);
  auto middle = s3->ReadRange("dir/object.bin", 123'456, 1000);
  ASSERT_TRUE(middle.ok());
  EXPECT_TRUE(*middle == data.substr(123'456, 1000));
}

TEST_F(DelayProxyTest, CountsForwardedRequestsAndAnswersStatsItself) {
  std::string endpoint = StartProxy({});
  ASSERT_FALSE(endpoint.empty());
  auto s3 = ClientFor(endpoint, "counted");
  ASSERT_TRUE(s3->CreateBucket().ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s3->PutObject("k" + std::to_string(i), "x").ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s3->ReadRange("k0", 0, 1).ok());

  RunResult r = RunProgram({"/usr/bin/curl", "-sf", endpoint + "/__proxy_stats/reset"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json stats = nlohmann::json::parse(r.out);
  EXPECT_EQ(stats["put_requests"], 6);  // bucket + 5 objects
  EXPECT_EQ(stats["get_requests"], 3);
  EXPECT_EQ(stats["requests"], 9);
  RunResult after = RunProgram({"/usr/bin/curl", "-sf", endpoint + "/__proxy_stats"});
  EXPECT_EQ(nlohmann::json::parse(after.out)["requests"], 0);
}

TEST_F(DelayProxyTest, BandwidthCapSlowsLargeResponses) {
  std::string endpoint = StartProxy({"--bandwidth", "1MiB/s"});
  ASSERT_FALSE(endpoint.empty());
  auto s3 = ClientFor(endpoint, "capped");
  ASSERT_TRUE(s3->CreateBucket().ok());
  std::string data = RandomBytes(512 * 1024, 7);
  ASSERT_TRUE(s3->PutObject("big", data).ok());
  auto start = SteadyClock::now();
  auto read = s3->ReadRange("big", 0, data.size());
  auto elapsed = SteadyClock::now() - start;
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(*read == data);
  // 512 KiB at 1 MiB/s, less the 64 KiB burst: >= ~0.43 s.
  EXPECT_GE(elapsed, milliseconds(400));
}

TEST_F(DelayProxyTest, WritesStatsFileOnSigterm) {
  ScratchDir dir;
  std::string file = dir.path() + "/stats.json";
  std::string endpoint = StartProxy({"--stats-file", file, "--stats-interval", "1h"});
  ASSERT_FALSE(endpoint.empty());
  auto s3 = ClientFor(endpoint, "stopped");
  ASSERT_TRUE(s3->CreateBucket().ok());
  EXPECT_EQ(proxy_->Stop(), 0);
  RunResult cat = RunProgram({"/bin/cat", file});
  ASSERT_EQ(cat.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(cat.out)["put_requests"], 1);
}

TEST(DelayProxyFlags, BadValuesGetAClearError) {
  RunResult r = RunProgram({PROXY_PATH, "--upstream", "127.0.0.1:1", "--delay", "ten"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--delay"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace granary::bench_test
