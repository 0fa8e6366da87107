// Credential and setting resolution in AWS order, with a fake environment and
// temporary ~/.aws files; plus S3 option parsing (ResolveS3Options).
#include "ufs/aws_credentials.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ufs/s3_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using Map = std::map<std::string, std::string>;

class AwsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("granary-aws-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / ".aws");
    env_["HOME"] = dir_.string();
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
  Write(dir_ / ".aws/credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n");
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
  auto s = ResolveAwsSettings({}, {{"accessKeyIdFile", (dir_ / "ak").string()},
                                   {"secretAccessKeyFile", (dir_ / "sk").string()}}, Env());
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

}  // namespace
}  // namespace granary
