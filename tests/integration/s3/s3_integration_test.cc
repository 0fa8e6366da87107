// S3Ufs against a real S3-compatible server (moto_server on loopback):
// listing 10,000 objects with paging, byte-exact ranged reads, the errors a
// user sees for a missing bucket or key, and a server that dies mid-test
// (retries, then a clear Unavailable error, never a hang).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

#include "common/thread_pool.h"
#include "testing/moto_server.h"
#include "testing/random_bytes.h"
#include "ufs/curl_client.h"
#include "ufs/open.h"
#include "ufs/s3_ufs.h"

namespace granary {
namespace {

using testing::MotoServer;

// Hermetic options: explicit endpoint and test credentials; the process
// environment and ~/.aws are not consulted.
std::unique_ptr<S3Ufs> MakeS3(const std::string& endpoint, const std::string& bucket,
                              const std::map<std::string, std::string>& extra = {}) {
  UfsOptions o{.options = {{"endpoint", endpoint}},
               .secrets = {{"accessKeyId", "testing"}, {"secretAccessKey", "testing"}}};
  for (auto& [k, v] : extra) o.options[k] = v;
  auto resolved = ResolveS3Options(o, [](std::string_view) { return std::nullopt; });
  EXPECT_TRUE(resolved.ok()) << resolved.status().ToString();
  return std::make_unique<S3Ufs>(bucket, *resolved);
}

std::string KeyFor(int i) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "train/p%03d/img%05d.jpg", i % 100, i);
  return buf;
}

std::string BodyFor(int i) { return "object-" + std::to_string(i) + std::string(i % 37, 'x'); }

class S3IntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = MotoServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server).release();
    auto s3 = MakeS3(server_->endpoint(), "data");
    ASSERT_TRUE(s3->CreateBucket().ok());
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (server_ == nullptr) GTEST_SKIP() << "moto_server did not start";
  }

  static MotoServer* server_;
};
MotoServer* S3IntegrationTest::server_ = nullptr;

TEST_F(S3IntegrationTest, TenThousandObjectsListExactlyWithPaging) {
  auto s3 = MakeS3(server_->endpoint(), "data");
  constexpr int kObjects = 10'000;
  std::atomic<int> failures{0};
  ParallelFor(kObjects, 32, [&](size_t i) {
    if (!s3->PutObject(KeyFor(static_cast<int>(i)), BodyFor(static_cast<int>(i))).ok()) {
      failures.fetch_add(1);
    }
  });
  ASSERT_EQ(failures.load(), 0);

  auto all = s3->ListAll("train/", 16);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), static_cast<size_t>(kObjects));
  std::vector<std::string> expected;
  for (int i = 0; i < kObjects; ++i) expected.push_back(KeyFor(i));
  std::sort(expected.begin(), expected.end());
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_EQ((*all)[i].key, expected[i]);
  }
  // Sizes and etags come through the XML listing.
  for (const auto& o : *all) {
    int id = std::stoi(o.key.substr(o.key.size() - 9, 5));
    ASSERT_EQ(o.size, BodyFor(id).size()) << o.key;
    ASSERT_FALSE(o.etag.empty());
    ASSERT_GT(o.mtime_ns, 0);
  }

  // Small pages: 100 objects under one prefix in pages of 7 -> 15 pages.
  ListRequest req{.prefix = "train/p042/", .max_keys = 7};
  std::vector<std::string> paged;
  int pages = 0;
  do {
    auto page = s3->List(req);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    EXPECT_LE(page->objects.size(), 7u);
    for (auto& o : page->objects) paged.push_back(o.key);
    req.continuation_token = page->next_token;
  } while (!req.continuation_token.empty());
  EXPECT_EQ(pages, 15);
  ASSERT_EQ(paged.size(), 100u);
  EXPECT_TRUE(std::is_sorted(paged.begin(), paged.end()));

  // One level with a delimiter: the 100 sub-prefixes.
  auto level = s3->List(ListRequest{.prefix = "train/", .delimiter = "/"});
  ASSERT_TRUE(level.ok());
  EXPECT_TRUE(level->objects.empty());
  ASSERT_EQ(level->common_prefixes.size(), 100u);
  EXPECT_EQ(level->common_prefixes.front(), "train/p000/");
}

TEST_F(S3IntegrationTest, RangedReadsAreByteExact) {
  auto s3 = MakeS3(server_->endpoint(), "data");
  std::string data(3 * 1024 * 1024 + 17, '\0');
  std::mt19937 rng(5);
  for (char& c : data) c = static_cast<char>(rng());
  const std::string key = "ranges/blob with space+plus.bin";
  ASSERT_TRUE(s3->PutObject(key, data).ok());

  auto st = s3->Stat(key);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, data.size());
  EXPECT_FALSE(st->etag.empty());
  EXPECT_GT(st->mtime_ns, 0);

  struct Case {
    uint64_t offset, length;
  };
  for (Case c : {Case{0, 10}, Case{0, 1 << 20}, Case{1'500'000, 123'457},
                 Case{data.size() - 100, 100}, Case{data.size() - 10, 4096}}) {
    auto got = s3->ReadRange(key, c.offset, c.length);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, data.substr(c.offset, c.length)) << "offset " << c.offset;
  }
  auto whole = s3->ReadRange(key, 0, data.size() + 1000);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, data);
  auto past = s3->ReadRange(key, data.size() + 5, 100);
  ASSERT_TRUE(past.ok()) << past.status().ToString();
  EXPECT_EQ(past->size(), 0u);

  // The listed etag is checked on every read: a rewritten object is Stale.
  std::string buf(100, '\0');
  auto same = s3->Read(key, 0, std::span<char>(buf.data(), buf.size()), st->etag);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  ASSERT_TRUE(s3->PutObject(key, "rewritten").ok());
  auto changed = s3->Read(key, 0, std::span<char>(buf.data(), buf.size()), st->etag);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), Code::kStale) << changed.status().ToString();
  EXPECT_NE(changed.status().message().find("granary sync"), std::string::npos);
}

TEST_F(S3IntegrationTest, MissingBucketAndKeyNameWhatIsMissing) {
  auto nope = MakeS3(server_->endpoint(), "nope");
  auto list = nope->List(ListRequest{.prefix = "x"});
  EXPECT_EQ(list.status().code(), Code::kNotFound);
  EXPECT_EQ(list.status().message(), "s3://nope/x: bucket does not exist (404 NoSuchBucket)");
  auto stat = nope->Stat("x");
  EXPECT_EQ(stat.status().message(), "s3://nope/x: bucket does not exist (404 NoSuchBucket)");
  auto read = nope->ReadRange("x", 0, 10);
  EXPECT_EQ(read.status().message(), "s3://nope/x: bucket does not exist (404 NoSuchBucket)");

  auto s3 = MakeS3(server_->endpoint(), "data");
  auto missing = s3->Stat("no/such/key");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message(), "s3://data/no/such/key: no such key (404 NoSuchKey)");
  auto missing_read = s3->ReadRange("no/such/key", 0, 10);
  EXPECT_EQ(missing_read.status().message(), "s3://data/no/such/key: no such key (404 NoSuchKey)");
}

TEST_F(S3IntegrationTest, OpenUnderStorageReachesTheSameObjects) {
  auto s3 = MakeS3(server_->endpoint(), "data");
  ASSERT_TRUE(s3->PutObject("open/hello.txt", "hello").ok());
  auto uri = ParseUri("s3://data/open");
  ASSERT_TRUE(uri.ok());
  auto ufs = NewS3Ufs(
      *uri, UfsOptions{.options = {{"endpoint", server_->endpoint()}},
                       .secrets = {{"accessKeyId", "testing"}, {"secretAccessKey", "testing"}}});
  ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();
  EXPECT_EQ((*ufs)->Root(), "s3://data");
  auto text = (*ufs)->ReadRange("open/hello.txt", 0, 100);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "hello");
}

TEST_F(S3IntegrationTest, VirtualHostAddressingReachesTheSameObjects) {
  auto path_style = MakeS3(server_->endpoint(), "data");
  ASSERT_TRUE(path_style->PutObject("vhost/a.txt", "virtual").ok());
  // curl resolves *.localhost to loopback, so http://data.localhost:PORT works.
  const std::string localhost = "http://localhost:" + std::to_string(server_->port());
  auto vhost = MakeS3(localhost, "data", {{"addressing", "virtual"}});
  auto text = vhost->ReadRange("vhost/a.txt", 0, 100);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "virtual");
  auto page = vhost->List(ListRequest{.prefix = "vhost/"});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "vhost/a.txt");
}

// Creates an IAM user and access key on a moto server whose first requests
// are unauthenticated; returns {access key id, secret}.
std::pair<std::string, std::string> CreateIamKey(const std::string& endpoint) {
  CurlClient http;
  // moto routes by the service named in the credential scope; unauthenticated
  // actions do not check the signature.
  const std::vector<std::pair<std::string, std::string>> headers = {
      {"Authorization",
       "AWS4-HMAC-SHA256 Credential=bootstrap/20240101/us-east-1/iam/aws4_request, "
       "SignedHeaders=host, Signature=0"},
      {"Content-Type", "application/x-www-form-urlencoded"}};
  const std::string create_user = "Action=CreateUser&UserName=reader&Version=2010-05-08";
  const std::string create_key = "Action=CreateAccessKey&UserName=reader&Version=2010-05-08";
  auto user = http.Send(HttpRequest{
      .method = "POST", .url = endpoint + "/", .headers = headers, .body = create_user});
  EXPECT_TRUE(user.ok() && user->status == 200)
      << (user.ok() ? user->body : user.status().ToString());
  auto key = http.Send(
      HttpRequest{.method = "POST", .url = endpoint + "/", .headers = headers, .body = create_key});
  EXPECT_TRUE(key.ok() && key->status == 200) << (key.ok() ? key->body : key.status().ToString());
  auto between = [&](const std::string& tag) {
    const std::string& b = key->body;
    size_t start = b.find("<" + tag + ">");
    size_t end = b.find("</" + tag + ">");
    if (start == std::string::npos || end == std::string::npos) return std::string();
    start += tag.size() + 2;
    return b.substr(start, end - start);
  };
  return {between("AccessKeyId"), between("SecretAccessKey")};
}

TEST(S3Credentials, WrongKeysArePermissionDeniedNamingTheS3Code) {
  // Two unauthenticated requests: CreateUser, CreateAccessKey.
  auto server = MotoServer::Start(testing::MotoServerOptions{.initial_no_auth_actions = 2});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string endpoint = (*server)->endpoint();
  auto [key_id, secret] = CreateIamKey(endpoint);
  ASSERT_FALSE(key_id.empty());
  ASSERT_FALSE(secret.empty());

  auto with = [&](const std::string& id, const std::string& sk) {
    UfsOptions o{.options = {{"endpoint", endpoint}},
                 .secrets = {{"accessKeyId", id}, {"secretAccessKey", sk}}};
    return std::make_unique<S3Ufs>(
        "data", *ResolveS3Options(o, [](std::string_view) { return std::nullopt; }));
  };
  auto unknown = with("AKIDUNKNOWN", "whatever")->List(ListRequest{});
  EXPECT_EQ(unknown.status().code(), Code::kPermissionDenied);
  EXPECT_NE(unknown.status().message().find("403 InvalidAccessKeyId"), std::string::npos)
      << unknown.status().message();

  auto wrong_secret = with(key_id, secret + "x")->List(ListRequest{});
  EXPECT_EQ(wrong_secret.status().code(), Code::kPermissionDenied);
  EXPECT_NE(wrong_secret.status().message().find("403 SignatureDoesNotMatch"), std::string::npos)
      << wrong_secret.status().message();
  EXPECT_EQ(wrong_secret.status().message().find(secret), std::string::npos);

  // The right secret passes moto's signature check; the user has no policy.
  auto no_policy = with(key_id, secret)->List(ListRequest{});
  EXPECT_EQ(no_policy.status().code(), Code::kPermissionDenied);
  EXPECT_NE(no_policy.status().message().find("403 AccessDenied"), std::string::npos)
      << no_policy.status().message();
}

TEST(S3Unreachable, RefusedConnectionIsRetriedThenReportedClearly) {
  auto s3 = MakeS3("http://127.0.0.1:1", "data");
  auto r = s3->Stat("x");
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(),
            "s3://data/x: endpoint http://127.0.0.1:1 unreachable after 4 attempts "
            "(Couldn't connect to server)");
}

TEST(S3ServerKilled, RetriesThenUnavailableNeverAHang) {
  auto server = MotoServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto s3 =
      MakeS3((*server)->endpoint(), "doomed", {{"connectTimeout", "1s"}, {"requestTimeout", "5s"}});
  ASSERT_TRUE(s3->CreateBucket().ok());
  ASSERT_TRUE(s3->PutObject("a", "alive").ok());
  ASSERT_EQ(*s3->ReadRange("a", 0, 5), "alive");  // a pooled keep-alive connection now exists

  (*server)->Kill();
  const auto start = std::chrono::steady_clock::now();
  auto r = s3->ReadRange("a", 0, 5);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("s3://doomed/a: endpoint " + (*server)->endpoint() +
                                      " unreachable after 4 attempts"),
            std::string::npos)
      << r.status().message();
  // Not a performance bound: a generous guard that the failure is bounded (no hang).
  EXPECT_LT(elapsed, std::chrono::seconds(30));
  auto list = s3->List(ListRequest{});
  EXPECT_EQ(list.status().code(), Code::kUnavailable);
}

// Writes (the upload path): a staged file becomes one object, whole.
using testing::RandomBytes;

int StagedFile(const std::string& data) {
  char tmpl[] = "/tmp/granary-s3-write-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ::unlink(tmpl);
  EXPECT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  return fd;
}

TEST_F(S3IntegrationTest, WriteUploadsSmallFilesWithOnePutAndLargeOnesInParallelParts) {
  auto s3 = MakeS3(server_->endpoint(), "data");
  std::string small = RandomBytes(100'000, 1);
  int fd = StagedFile(small);
  auto info = s3->Write("ckpt/small.bin", fd, small.size());
  ::close(fd);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, small.size());
  EXPECT_EQ(*s3->ReadRange("ckpt/small.bin", 0, small.size() + 1), small);

  // 23 MiB in 5 MiB parts, three at once: five parts, the last one short.
  std::string big = RandomBytes((23u << 20) + 4321, 2);
  fd = StagedFile(big);
  info = s3->Write("ckpt/big.bin", fd, big.size(),
                   WriteOptions{.part_size = 5u << 20, .parallel_parts = 3});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, big.size());
  EXPECT_NE(info->etag.find('-'), std::string::npos) << info->etag;  // a multipart etag: "<md5>-5"
  auto back = s3->ReadRange("ckpt/big.bin", 0, big.size() + 1);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == big);

  // A staged file shorter than claimed: a part fails, the upload is aborted
  // and no object appears, not even a partial one.
  info = s3->Write("ckpt/broken.bin", fd, big.size() + (6u << 20),
                   WriteOptions{.part_size = 5u << 20});
  ::close(fd);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("shorter"), std::string::npos) << info.status().ToString();
  EXPECT_EQ(s3->Stat("ckpt/broken.bin").status().code(), Code::kNotFound);
  auto stats = s3->stats();
  EXPECT_EQ(stats.write_requests, 3u);
  EXPECT_EQ(stats.write_bytes, small.size() + big.size());

  EXPECT_TRUE(s3->Delete("ckpt/small.bin").ok());
  EXPECT_EQ(s3->Stat("ckpt/small.bin").status().code(), Code::kNotFound);
  EXPECT_TRUE(s3->Delete("ckpt/small.bin").ok());  // already gone: fine
  EXPECT_EQ(s3->Write("ckpt/", 0, 0).status().code(), Code::kInvalidArgument);
}

TEST_F(S3IntegrationTest, AStreamingUploadSendsPartsWhileTheFileGrowsAndAppearsOnlyWhenCompleted) {
  auto s3 = MakeS3(server_->endpoint(), "data");
  const uint64_t part = 5u << 20;
  const std::string data = RandomBytes(2 * part + 4321, 3);
  int fd = StagedFile(data.substr(0, part));
  auto up =
      s3->StartUpload("ckpt/stream.bin", fd, WriteOptions{.part_size = part, .parallel_parts = 2});
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_FALSE((*up)->id().empty());
  (*up)->AddPart(0);  // goes out while the file keeps growing
  ASSERT_EQ(::pwrite(fd, data.data() + part, part, static_cast<off_t>(part)),
            static_cast<ssize_t>(part));
  (*up)->AddPart(1);
  ASSERT_EQ(
      ::pwrite(fd, data.data() + 2 * part, data.size() - 2 * part, static_cast<off_t>(2 * part)),
      static_cast<ssize_t>(data.size() - 2 * part));
  EXPECT_EQ(s3->Stat("ckpt/stream.bin").status().code(), Code::kNotFound)
      << "visible before completion";
  ::close(fd);  // the upload reads its own duplicate
  auto info = s3->CompleteUpload(**up, data.size());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, data.size());
  EXPECT_NE(info->etag.find("-3"), std::string::npos) << info->etag;  // two parts and the tail
  auto back = s3->ReadRange("ckpt/stream.bin", 0, data.size() + 1);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);

  // Abandoned (the writer went back into a sent part): no object appears.
  fd = StagedFile(data);
  up = s3->StartUpload("ckpt/abandoned.bin", fd, WriteOptions{.part_size = part});
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  (*up)->AddPart(0);
  (*up)->AddPart(1);
  const std::string id = (*up)->id();
  up->reset();  // aborts, after the parts in flight
  EXPECT_EQ(s3->Stat("ckpt/abandoned.bin").status().code(), Code::kNotFound);
  EXPECT_TRUE(s3->AbortUpload("ckpt/abandoned.bin", id).ok())
      << "aborting an aborted upload is fine";
  // Completing with fewer bytes than the parts sent is refused, and aborts.
  up = s3->StartUpload("ckpt/short.bin", fd, WriteOptions{.part_size = part});
  ASSERT_TRUE(up.ok());
  (*up)->AddPart(0);
  (*up)->AddPart(1);
  info = s3->CompleteUpload(**up, part);
  EXPECT_EQ(info.status().code(), Code::kInvalidArgument) << info.status().ToString();
  EXPECT_EQ(s3->Stat("ckpt/short.bin").status().code(), Code::kNotFound);
  ::close(fd);
  EXPECT_EQ(s3->StartUpload("ckpt/x", -1).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace granary
