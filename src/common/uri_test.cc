#include "common/uri.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

TEST(ParseUri, S3) {
  auto u = ParseUri("s3://my-bucket/imagenet//train/");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->scheme, Scheme::kS3);
  EXPECT_EQ(u->bucket, "my-bucket");
  EXPECT_EQ(u->key, "imagenet/train/");
  EXPECT_EQ(u->Root(), "s3://my-bucket");
  EXPECT_EQ(u->ToString(), "s3://my-bucket/imagenet/train/");
  auto oss = ParseUri("oss://data-bkt");
  ASSERT_TRUE(oss.ok());
  EXPECT_EQ(oss->scheme, Scheme::kS3);
  EXPECT_EQ(oss->key, "");
}

TEST(ParseUri, FileAndPlainPaths) {
  auto f = ParseUri("file:///data/imagenet");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->scheme, Scheme::kFile);
  EXPECT_EQ(f->key, "data/imagenet");
  EXPECT_EQ(f->ToString(), "file:///data/imagenet");
  auto p = ParseUri("/mnt/nfs/x");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->scheme, Scheme::kFile);
  EXPECT_EQ(p->key, "mnt/nfs/x");
  auto rel = ParseUri("some/dir");
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ(rel->scheme, Scheme::kFile);
  EXPECT_TRUE(rel->key.ends_with("some/dir"));
}

TEST(ParseUri, Http) {
  auto h = ParseUri("http://127.0.0.1:8080/a/b.jpg");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->scheme, Scheme::kHttp);
  EXPECT_EQ(h->host, "127.0.0.1:8080");
  EXPECT_EQ(h->key, "a/b.jpg");
  EXPECT_EQ(h->ToString(), "http://127.0.0.1:8080/a/b.jpg");
  EXPECT_EQ(ParseUri("https://example.com")->scheme, Scheme::kHttps);
}

TEST(ParseUri, BadInputNamesValueAndProblem) {
  struct Case {
    const char* uri;
    const char* why;
  } cases[] = {
      {"", "empty"},
      {"s3://", "missing bucket"},
      {"s3:///key", "missing bucket"},
      {"s3://UPPER/x", "invalid bucket name"},
      {"gs://b/x", "unsupported scheme 'gs'"},
      {"file://relative", "absolute path"},
      {"http:///x", "missing host"},
      {"http://user:pw@host/x", "credentials"},
  };
  for (const auto& c : cases) {
    auto r = ParseUri(c.uri);
    ASSERT_FALSE(r.ok()) << c.uri;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + StripUserinfo(c.uri) + "'"),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.why), std::string::npos) << r.status().message();
  }
}

TEST(Uri, UserinfoIsNeverEchoed) {
  EXPECT_EQ(StripUserinfo("http://u:hunter2@host:9000/x?y"), "http://***@host:9000/x?y");
  EXPECT_EQ(StripUserinfo("https://host/a@b"), "https://host/a@b");  // '@' in the path
  EXPECT_EQ(StripUserinfo("s3://bucket/key"), "s3://bucket/key");
  EXPECT_EQ(StripUserinfo("no scheme u:p@h"), "no scheme u:p@h");
  auto r = ParseUri("http://user:hunter2@host/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find("hunter2"), std::string::npos) << r.status().message();
}

TEST(Uri, Child) {
  auto u = *ParseUri("s3://bkt/prefix/");
  EXPECT_EQ(u.Child("a/b").key, "prefix/a/b");
  auto root = *ParseUri("s3://bkt");
  EXPECT_EQ(root.Child("x").key, "x");
}

}  // namespace
}  // namespace granary
