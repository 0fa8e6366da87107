// Credential and setting resolution in AWS order, with a fake environment and
// temporary ~/.aws files; plus S3 option parsing (ResolveS3Options).
// The temporary-credential sources (container endpoint, IMDSv2, STS
// web identity on moto_server) against servers on loopback, refresh ahead of
// expiry on a fake clock, and S3 reads that keep working when the server
// expires the credentials in the middle of an epoch.
#include "ufs/aws_credentials.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "testing/fake_clock.h"
#include "testing/moto_server.h"
#include "ufs/s3_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using Map = std::map<std::string, std::string>;

class AwsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("granary-aws-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / ".aws");
    env_["HOME"] = dir_.string();
    // No test probes a real instance metadata service; IMDS tests set an endpoint.
    env_["AWS_EC2_METADATA_DISABLED"] = "true";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  EnvLookup Env() {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }

  fs::path dir_;
  Map env_;
};

TEST_F(AwsCredentialsTest, NothingAnywhereMeansAnonymousInUsEast1) {
  auto s = ResolveAwsSettings({}, {}, Env());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->credentials.has_value());
  EXPECT_EQ(s->region, "us-east-1");
  EXPECT_EQ(s->profile, "default");
  EXPECT_EQ(s->endpoint, "");
}

TEST_F(AwsCredentialsTest, SecretsBeatEnvironmentWhichBeatsFiles) {
  Write(dir_ / ".aws/credentials",
        "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n");
  auto s = ResolveAwsSettings({}, {}, Env());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->credentials->access_key_id, "FILEKEY");

  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  env_["AWS_SESSION_TOKEN"] = "ENVTOKEN";
  s = ResolveAwsSettings({}, {}, Env());
  EXPECT_EQ(s->credentials->access_key_id, "ENVKEY");
  EXPECT_EQ(s->credentials->session_token, "ENVTOKEN");

  s = ResolveAwsSettings({}, {{"accessKeyId", "K"}, {"secretAccessKey", "S"}}, Env());
  EXPECT_EQ(s->credentials->access_key_id, "K");
  EXPECT_EQ(s->credentials->secret_access_key, "S");
  EXPECT_EQ(s->credentials->session_token, "");
}

TEST_F(AwsCredentialsTest, ProfileFromEnvReadsCredentialsAndConfigSections) {
  Write(dir_ / ".aws/credentials",
        "[default]\naws_access_key_id=D\naws_secret_access_key=DS\n"
        "[dev]\naws_access_key_id = DEVKEY\naws_secret_access_key = DEVSECRET\n");
  Write(dir_ / ".aws/config",
        "[default]\nregion = eu-west-1\n[profile dev]\nregion = ap-south-1\n"
        "endpoint_url = http://127.0.0.1:9000\n");
  env_["AWS_PROFILE"] = "dev";
  auto s = ResolveAwsSettings({}, {}, Env());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->profile, "dev");
  EXPECT_EQ(s->credentials->access_key_id, "DEVKEY");
  EXPECT_EQ(s->region, "ap-south-1");
  EXPECT_EQ(s->endpoint, "http://127.0.0.1:9000");
  // The option beats the environment.
  s = ResolveAwsSettings({{"profile", "default"}}, {}, Env());
  EXPECT_EQ(s->credentials->access_key_id, "D");
  EXPECT_EQ(s->region, "eu-west-1");
}

TEST_F(AwsCredentialsTest, SharedFileLocationsFollowTheirVariables) {
  Write(dir_ / "creds", "[default]\naws_access_key_id=ALT\naws_secret_access_key=ALTS\n");
  Write(dir_ / "conf", "[default]\nregion=us-west-2\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = (dir_ / "creds").string();
  env_["AWS_CONFIG_FILE"] = (dir_ / "conf").string();
  auto s = ResolveAwsSettings({}, {}, Env());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->credentials->access_key_id, "ALT");
  EXPECT_EQ(s->region, "us-west-2");
}

TEST_F(AwsCredentialsTest, RegionAndEndpointEnvironmentOrder) {
  env_["AWS_DEFAULT_REGION"] = "eu-central-1";
  EXPECT_EQ(ResolveAwsSettings({}, {}, Env())->region, "eu-central-1");
  env_["AWS_REGION"] = "eu-north-1";
  EXPECT_EQ(ResolveAwsSettings({}, {}, Env())->region, "eu-north-1");
  EXPECT_EQ(ResolveAwsSettings({{"region", "sa-east-1"}}, {}, Env())->region, "sa-east-1");
  env_["AWS_ENDPOINT_URL"] = "http://minio:9000";
  env_["AWS_CA_BUNDLE"] = "/etc/ca.pem";
  auto s = ResolveAwsSettings({}, {}, Env());
  EXPECT_EQ(s->endpoint, "http://minio:9000");
  EXPECT_EQ(s->ca_bundle, "/etc/ca.pem");
}

TEST_F(AwsCredentialsTest, FluidStyleSecretFilesAreRead) {
  Write(dir_ / "ak", "FILEAK\n");
  Write(dir_ / "sk", "FILESK\n");
  auto s = ResolveAwsSettings({},
                              {{"accessKeyIdFile", (dir_ / "ak").string()},
                               {"secretAccessKeyFile", (dir_ / "sk").string()}},
                              Env());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->credentials->access_key_id, "FILEAK");
  EXPECT_EQ(s->credentials->secret_access_key, "FILESK");

  auto bad = ResolveAwsSettings({}, {{"accessKeyIdFile", "/nonexistent/ak"}}, Env());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("accessKeyIdFile"), std::string::npos);
}

TEST_F(AwsCredentialsTest, HalfAKeyPairIsAnErrorThatNeverEchoesTheSecret) {
  auto s = ResolveAwsSettings({}, {{"secretAccessKey", "TOPSECRET"}}, Env());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("accessKeyId"), std::string::npos);
  EXPECT_EQ(s.status().message().find("TOPSECRET"), std::string::npos);
}

TEST_F(AwsCredentialsTest, S3OptionsDefaultsAndOverrides) {
  auto o = ResolveS3Options(UfsOptions{}, Env());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_TRUE(o->anonymous);
  EXPECT_EQ(o->max_concurrency, 128);

  o = ResolveS3Options(UfsOptions{.options = {{"endpoint", "http://127.0.0.1:9000/"},
                                              {"region", "eu-west-1"},
                                              {"addressing", "virtual"},
                                              {"caBundle", "/ca.pem"},
                                              {"maxConcurrency", "8"},
                                              {"connectTimeout", "250ms"},
                                              {"requestTimeout", "10s"},
                                              {"maxAttempts", "2"}},
                                  .secrets = {{"accessKeyId", "K"}, {"secretAccessKey", "S"}}},
                       Env());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(o->ca_bundle, "");  // http:// ignores the CA bundle
  EXPECT_EQ(o->addressing, S3Addressing::kVirtual);
  EXPECT_EQ(o->max_concurrency, 8);
  EXPECT_EQ(o->connect_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(o->request_timeout, std::chrono::seconds(10));
  EXPECT_EQ(o->retry.max_attempts, 2);
  EXPECT_FALSE(o->anonymous);
  EXPECT_EQ(o->credentials.access_key_id, "K");

  o = ResolveS3Options(UfsOptions{.options = {{"anonymous", "true"}},
                                  .secrets = {{"accessKeyId", "K"}, {"secretAccessKey", "S"}}},
                       Env());
  EXPECT_TRUE(o->anonymous);
}

TEST_F(AwsCredentialsTest, S3OptionErrorsNameTheKeyAndValue) {
  struct Case {
    Map options;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{{"endpoitn", "x"}}, "endpoitn"},
           {{{"addressing", "sideways"}}, "sideways"},
           {{{"maxConcurrency", "0"}}, "maxConcurrency"},
           {{{"maxAttempts", "many"}}, "many"},
           {{{"connectTimeout", "soon"}}, "connectTimeout"},
           {{{"anonymous", "maybe"}}, "maybe"},
           {{{"endpoint", "ftp://host"}}, "ftp://host"},
       }) {
    auto o = ResolveS3Options(UfsOptions{.options = c.options}, Env());
    EXPECT_EQ(o.status().code(), Code::kInvalidArgument) << c.expect;
    EXPECT_NE(o.status().message().find(c.expect), std::string::npos) << o.status().message();
  }
}

TEST(ParseIni, SectionsKeysCommentsAndSpaces) {
  auto ini = ParseIni("# c\n[default]\n a = 1 \n;x\n[profile dev]\r\nb=2\r\n");
  EXPECT_EQ(ini["default"]["a"], "1");
  EXPECT_EQ(ini["profile dev"]["b"], "2");
}

// ---- Temporary credentials ----

struct LoopbackRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // keys lowercased
  std::string body;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct LoopbackResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// An HTTP/1.1 server on 127.0.0.1: one thread accepts connections and answers
// one request per connection with `handler` (then closes). The handler runs
// on that thread only.
class LoopbackHttpServer {
 public:
  using Handler = std::function<LoopbackResponse(const LoopbackRequest&)>;
  explicit LoopbackHttpServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~LoopbackHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void Serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      LoopbackRequest req;
      if (ReadRequest(c, req)) {
        LoopbackResponse resp = handler_(req);
        std::string out = "HTTP/1.1 " + std::to_string(resp.status) +
                          " X\r\nConnection: close\r\n" +
                          "Content-Length: " + std::to_string(resp.body.size()) + "\r\n";
        for (const auto& [k, v] : resp.headers) out += k + ": " + v + "\r\n";
        out += "\r\n";
        if (req.method != "HEAD") out += resp.body;
        for (size_t sent = 0; sent < out.size();) {
          ssize_t n = ::send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
          if (n <= 0) break;
          sent += static_cast<size_t>(n);
        }
      }
      ::close(c);
    }
  }

  static bool ReadRequest(int c, LoopbackRequest& req) {
    std::string data;
    char buf[4096];
    size_t header_end;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return false;
      data.append(buf, static_cast<size_t>(n));
    }
    std::istringstream head(data.substr(0, header_end));
    std::string line;
    std::getline(head, line);
    std::istringstream(line) >> req.method >> req.path;
    while (std::getline(head, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon);
      for (char& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      req.headers[key] = std::string(line.substr(line.find_first_not_of(' ', colon + 1)));
    }
    req.body = data.substr(header_end + 4);
    const size_t want =
        req.headers.contains("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    while (req.body.size() < want) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return false;
      req.body.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string Iso8601(int64_t wall_ns) {
  const time_t t = static_cast<time_t>(wall_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string CredentialsJson(const std::string& key, int64_t expiration_ns) {
  return R"({"AccessKeyId":")" + key + R"(","SecretAccessKey":"SECRET-)" + key +
         R"(","Token":"TOKEN-)" + key + R"(","Expiration":")" + Iso8601(expiration_ns) + "\"}";
}

int64_t WallNowNs() { return Clock::Real()->WallNanos(); }
constexpr int64_t kHourNs = 3600LL * 1'000'000'000;

TEST_F(AwsCredentialsTest, ContainerCredentialsSendTheTokenFromTheFile) {
  std::atomic<int> fetches{0}, refused{0};
  std::string expected_token = "Bearer one";
  LoopbackHttpServer server([&](const LoopbackRequest& r) {
    if (r.path != "/creds" || r.Header("authorization") != expected_token) {
      ++refused;
      return LoopbackResponse{.status = 401};
    }
    int n = ++fetches;
    return LoopbackResponse{.body =
                                CredentialsJson("CKEY" + std::to_string(n), WallNowNs() + kHourNs)};
  });
  Write(dir_ / "token", "Bearer one\n");
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = server.url() + "/creds";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = (dir_ / "token").string();
  auto settings = ResolveAwsSettings({}, {}, Env());
  ASSERT_TRUE(settings.ok());
  auto provider = NewAwsCredentialsProvider(*settings, Env());
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  ASSERT_NE(*provider, nullptr);
  EXPECT_EQ((*provider)->source_name(), "container credentials");
  auto creds = (*provider)->Get();
  ASSERT_TRUE(creds.ok());
  EXPECT_EQ((*creds)->access_key_id, "CKEY1");
  EXPECT_EQ((*creds)->secret_access_key, "SECRET-CKEY1");
  EXPECT_EQ((*creds)->session_token, "TOKEN-CKEY1");
  EXPECT_GT((*creds)->expiration_ns, WallNowNs());

  // The token file is re-read on every fetch (EKS Pod Identity rotates it).
  expected_token = "Bearer two";
  Write(dir_ / "token", "Bearer two\n");
  auto changed = (*provider)->RefreshAfterRejection(**creds);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_TRUE(*changed);
  EXPECT_EQ((*(*provider)->Get())->access_key_id, "CKEY2");
  EXPECT_EQ(refused.load(), 0);

  // A refusing endpoint is an error naming the source, never the token.
  expected_token = "Bearer other";
  auto bad = NewAwsCredentialsProvider(*settings, Env());
  EXPECT_EQ(bad.status().code(), Code::kPermissionDenied);
  EXPECT_NE(bad.status().message().find("container credentials"), std::string::npos);
  EXPECT_EQ(bad.status().message().find("Bearer two"), std::string::npos);
}

TEST_F(AwsCredentialsTest, InstanceMetadataV2UsesASessionToken) {
  std::atomic<int> without_token{0}, credential_gets{0};
  LoopbackHttpServer server([&](const LoopbackRequest& r) {
    if (r.method == "PUT" && r.path == "/latest/api/token") {
      if (!r.headers.contains("x-aws-ec2-metadata-token-ttl-seconds"))
        return LoopbackResponse{.status = 400};
      return LoopbackResponse{.body = "IMDSTOKEN"};
    }
    if (r.Header("x-aws-ec2-metadata-token") != "IMDSTOKEN") {
      ++without_token;
      return LoopbackResponse{.status = 401};
    }
    if (r.path == "/latest/meta-data/iam/security-credentials/")
      return LoopbackResponse{.body = "node-role"};
    if (r.path == "/latest/meta-data/iam/security-credentials/node-role") {
      ++credential_gets;
      return LoopbackResponse{.body = R"({"Code":"Success","Type":"AWS-HMAC",)" +
                                      CredentialsJson("IKEY", WallNowNs() + kHourNs).substr(1)};
    }
    return LoopbackResponse{.status = 404};
  });
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = server.url() + "/";
  auto settings = ResolveAwsSettings({}, {}, Env());
  ASSERT_TRUE(settings.ok());
  // Disabled: nothing is asked, and no credentials means anonymous.
  auto provider = NewAwsCredentialsProvider(*settings, Env());
  ASSERT_TRUE(provider.ok());
  EXPECT_EQ(*provider, nullptr);
  EXPECT_EQ(credential_gets.load(), 0);

  env_.erase("AWS_EC2_METADATA_DISABLED");
  provider = NewAwsCredentialsProvider(*settings, Env());
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  ASSERT_NE(*provider, nullptr);
  EXPECT_EQ((*provider)->source_name(), "instance metadata");
  EXPECT_EQ((*(*provider)->Get())->access_key_id, "IKEY");
  EXPECT_EQ((*(*provider)->Get())->session_token, "TOKEN-IKEY");
  EXPECT_EQ(credential_gets.load(), 1);
  EXPECT_EQ(without_token.load(), 0);

  // No IMDS at the endpoint (nothing listens): anonymous, quickly.
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:1";
  provider = NewAwsCredentialsProvider(*settings, Env());
  ASSERT_TRUE(provider.ok());
  EXPECT_EQ(*provider, nullptr);
}

TEST_F(AwsCredentialsTest, WebIdentityAssumesTheRoleOnMotoSts) {
  auto moto = testing::MotoServer::Start();
  if (!moto.ok()) GTEST_SKIP() << moto.status().ToString();
  Write(dir_ / "web-token", "eyJhbGciOiJSUzI1NiJ9.payload.signature\n");
  // Web identity comes before the profile in the chain.
  Write(dir_ / ".aws/credentials",
        "[default]\naws_access_key_id=FILEKEY\naws_secret_access_key=FILES\n");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = (dir_ / "web-token").string();
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/granary-reader";
  env_["AWS_ROLE_SESSION_NAME"] = "granary-test";
  env_["AWS_ENDPOINT_URL_STS"] = (*moto)->endpoint();
  auto settings = ResolveAwsSettings({}, {}, Env());
  ASSERT_TRUE(settings.ok());
  auto provider = NewAwsCredentialsProvider(*settings, Env());
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  EXPECT_EQ((*provider)->source_name(), "web identity");
  auto creds = (*provider)->Get();
  ASSERT_TRUE(creds.ok());
  EXPECT_NE((*creds)->access_key_id, "FILEKEY");
  EXPECT_TRUE((*creds)->access_key_id.starts_with("ASIA")) << "moto issues ASIA… temporary keys";
  EXPECT_FALSE((*creds)->secret_access_key.empty());
  EXPECT_FALSE((*creds)->session_token.empty());
  EXPECT_GT((*creds)->expiration_ns, WallNowNs());

  // Resolved for S3 too: the signing credentials come from STS.
  auto s3 = ResolveS3Options(UfsOptions{.options = {{"endpoint", (*moto)->endpoint()}}}, Env());
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_FALSE(s3->anonymous);
  EXPECT_EQ(s3->credentials_provider->source_name(), "web identity");

  // A missing token file is an error naming the variable.
  fs::remove(dir_ / "web-token");
  auto bad = NewAwsCredentialsProvider(*settings, Env());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("AWS_WEB_IDENTITY_TOKEN_FILE"), std::string::npos);
}

// A container endpoint issuing "KEY<n>" on its n-th fetch, expiring `lifetime`
// after the fake clock's now; answers 500 while `failing`.
struct RotatingEndpoint {
  explicit RotatingEndpoint(testing::FakeClock* clock, int64_t lifetime_ns)
      : server([this, clock, lifetime_ns](const LoopbackRequest&) {
          if (failing) return LoopbackResponse{.status = 500};
          int n = ++fetches;
          return LoopbackResponse{
              .body = CredentialsJson("KEY" + std::to_string(n), clock->WallNanos() + lifetime_ns)};
        }) {}
  std::atomic<int> fetches{0};
  std::atomic<bool> failing{false};
  LoopbackHttpServer server;
};

TEST_F(AwsCredentialsTest, RefreshesBeforeExpiryAndKeepsValidOnesWhenTheRefreshFails) {
  testing::FakeClock clock;
  RotatingEndpoint endpoint(&clock, 60LL * 1'000'000'000);  // 60 s credentials
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = endpoint.server.url() + "/creds";
  auto provider = NewAwsCredentialsProvider(*ResolveAwsSettings({}, {}, Env()), Env(), &clock);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  auto& p = **provider;
  EXPECT_EQ((*p.Get())->access_key_id, "KEY1");

  // 60 s lifetime: refreshed once 30 s have passed (half-way), not before.
  clock.Advance(std::chrono::seconds(29));
  EXPECT_EQ((*p.Get())->access_key_id, "KEY1");
  EXPECT_EQ(endpoint.fetches.load(), 1);
  clock.Advance(std::chrono::seconds(2));
  EXPECT_EQ((*p.Get())->access_key_id, "KEY2");
  EXPECT_EQ(endpoint.fetches.load(), 2);
  EXPECT_EQ(p.refreshes(), 1u);

  // The endpoint fails during the refresh window: the still-valid KEY2 stays in use.
  endpoint.failing = true;
  clock.Advance(std::chrono::seconds(31));
  auto kept = p.Get();
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ((*kept)->access_key_id, "KEY2");
  // Once they have expired, a failing endpoint is an error...
  clock.Advance(std::chrono::seconds(30));
  EXPECT_EQ(p.Get().status().code(), Code::kUnavailable);
  // ...and the next Get after it recovers fetches new ones.
  endpoint.failing = false;
  EXPECT_EQ((*p.Get())->access_key_id, "KEY3");
}

TEST_F(AwsCredentialsTest, ProfileFilesAreReReadWhenTheyChange) {
  testing::FakeClock clock;
  Write(dir_ / ".aws/credentials", "[default]\naws_access_key_id=OLD\naws_secret_access_key=S\n");
  auto settings = ResolveAwsSettings({}, {}, Env());
  ASSERT_EQ(settings->credential_origin, AwsCredentialOrigin::kProfile);
  auto provider = NewAwsCredentialsProvider(*settings, Env(), &clock);
  ASSERT_TRUE(provider.ok());
  EXPECT_EQ((*(*provider)->Get())->access_key_id, "OLD");
  // A rotation tool rewrites the file (different size, so the change shows
  // even within the file system's mtime granularity).
  Write(dir_ / ".aws/credentials",
        "[default]\naws_access_key_id=NEWKEY\naws_secret_access_key=S\n");
  EXPECT_EQ((*(*provider)->Get())->access_key_id, "OLD");  // checked every 5 s
  clock.Advance(std::chrono::seconds(6));
  EXPECT_EQ((*(*provider)->Get())->access_key_id, "NEWKEY");

  // Static credentials never change, even after a rejection.
  AwsCredentialsProvider fixed(AwsCredentials{.access_key_id = "K", .secret_access_key = "S"});
  EXPECT_FALSE(*fixed.RefreshAfterRejection(**fixed.Get()));
  EXPECT_EQ(fixed.source_name(), "static");
}

// Expiry in the middle of a read-through epoch. One loopback server plays the
// container credentials endpoint and S3: S3 GETs signed with anything but the
// newest access key get 400 ExpiredToken, as AWS answers once a session
// expires. The endpoint's credentials claim an hour of life, so the provider
// cannot see the expiry coming: only the ExpiredToken answer tells it. Every
// 40 successful reads the server expires the current key.
TEST_F(AwsCredentialsTest, ExpiryInTheMiddleOfAReadEpochFailsNoRead) {
  constexpr int kObjects = 20, kEpochs = 6, kThreads = 4;
  std::atomic<int> generation{1}, ok_since_rotation{0}, expired_answers{0}, fetches{0};
  std::atomic<int> bad_signatures{0};
  auto object = [](int i) { return std::string(1000 + i, static_cast<char>('a' + i)); };
  LoopbackHttpServer server([&](const LoopbackRequest& r) {
    if (r.path == "/creds") {
      ++fetches;
      return LoopbackResponse{.body = CredentialsJson("GEN" + std::to_string(generation.load()),
                                                      WallNowNs() + kHourNs)};
    }
    const std::string auth = r.Header("authorization");
    const size_t at = auth.find("Credential=");
    const std::string key =
        at == std::string::npos ? "" : auth.substr(at + 11, auth.find('/', at) - at - 11);
    if (r.Header("x-amz-security-token") != "TOKEN-" + key) ++bad_signatures;
    if (key != "GEN" + std::to_string(generation.load())) {
      ++expired_answers;
      return LoopbackResponse{.status = 400,
                              .body =
                                  "<Error><Code>ExpiredToken</Code><Message>The provided token "
                                  "has expired.</Message></Error>"};
    }
    if (++ok_since_rotation == 40) {
      ok_since_rotation = 0;
      ++generation;
    }
    const int i = std::stoi(r.path.substr(r.path.rfind('/') + 1));
    return LoopbackResponse{.body = object(i), .headers = {{"ETag", "\"e\""}}};
  });
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = server.url() + "/creds";
  auto options = ResolveS3Options(UfsOptions{.options = {{"endpoint", server.url()}}}, Env());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  S3Ufs ufs("bucket", std::move(*options));

  std::atomic<int> failed{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < kThreads; ++t) {
    readers.emplace_back([&, t] {
      for (int e = 0; e < kEpochs; ++e) {
        for (int i = t; i < kObjects; i += kThreads) {
          std::string buf(2000, '\0');
          auto n = ufs.Read(std::to_string(i), 0, std::span<char>(buf), "");
          if (!n.ok()) {
            ++failed;
            ADD_FAILURE() << n.status().ToString();
            continue;
          }
          if (buf.substr(0, *n) != object(i)) ++wrong;
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(bad_signatures.load(), 0);
  // The credentials really expired mid-epoch, several times, and were re-fetched.
  EXPECT_GE(generation.load(), 3);
  EXPECT_GT(expired_answers.load(), 0);
  EXPECT_GE(fetches.load(), 3);
}

}  // namespace
}  // namespace granary
