// S3 uploads as the origin sees them: every part of a multipart
// upload carries a checksum of its own body that the origin can check — the
// body's SHA-256 in the signed x-amz-content-sha256 header, or, for an
// anonymous request, Content-MD5. Against a recording HTTP server.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/uri.h"
#include "ufs/open.h"
#include "ufs/sigv4.h"
#include "ufs/tiny_http_server_test_util.h"

namespace granary {
namespace {

using testing::Response;
using testing::TinyHttpServer;

// The value of header `name` (any case) in a raw request head, or "".
std::string Header(const std::string& request, std::string name) {
  std::string lower = request.substr(0, request.find("\r\n\r\n"));
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  size_t at = lower.find("\r\n" + name + ":");
  if (at == std::string::npos) return "";
  size_t start = at + name.size() + 3;
  size_t end = request.find("\r\n", start);
  std::string v = request.substr(start, end - start);
  v.erase(0, v.find_first_not_of(' '));
  return v;
}

class S3UploadTest : public ::testing::TestWithParam<bool> {  // anonymous?
 protected:
  // A minimal S3: starts uploads, takes parts (ETag = part number), completes
  // them and answers the HEAD after with the size completed.
  std::string Handle(const std::string& req) {
    std::lock_guard lock(mu_);
    requests_.push_back(req);
    if (req.starts_with("POST") && req.find("?uploads") != std::string::npos) {
      return Response(200,
                      "<InitiateMultipartUploadResult><UploadId>up-1</UploadId>"
                      "</InitiateMultipartUploadResult>");
    }
    if (req.starts_with("PUT")) {
      size_t n = req.find("partNumber=");
      return Response(
          200, "",
          "ETag: \"p" + req.substr(n + 11, req.find_first_of("& ", n) - n - 11) + "\"\r\n");
    }
    if (req.starts_with("POST")) {
      return Response(
          200,
          "<CompleteMultipartUploadResult><ETag>\"x-3\"</ETag></CompleteMultipartUploadResult>");
    }
    if (req.starts_with("HEAD")) {
      return "HTTP/1.1 200 X\r\nContent-Length: " + std::to_string(size_) +
             "\r\nETag: \"x-3\"\r\nConnection: close\r\n\r\n";
    }
    return Response(400, "");
  }

  std::mutex mu_;
  std::vector<std::string> requests_;
  uint64_t size_ = 0;
};

TEST_P(S3UploadTest, EveryPartCarriesTheChecksumOfItsOwnBody) {
  const bool anonymous = GetParam();
  TinyHttpServer server([this](const std::string& req) { return Handle(req); });
  UfsOptions opts{.options = {{"endpoint", server.url("")}, {"region", "us-east-1"}}};
  if (anonymous) {
    opts.options["anonymous"] = "true";
  } else {
    opts.secrets = {{"accessKeyId", "AKIDEXAMPLE"}, {"secretAccessKey", "wJalrXUtnFEMI/K7MDENG"}};
  }
  auto ufs = OpenUnderStorage(*ParseUri("s3://bucket"), opts);
  ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();

  // 12 MiB + 7 in 5 MiB parts: three parts, the last short.
  std::string data((12u << 20) + 7, '\0');
  std::mt19937 rng(5);
  for (char& c : data) c = static_cast<char>(rng());
  size_ = data.size();
  char path[] = "/tmp/granary-s3-upload-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  auto info = (*ufs)->Write("ckpt/model.pt", fd, data.size(),
                            WriteOptions{.part_size = 5u << 20, .parallel_parts = 2});
  ::close(fd);
  ASSERT_TRUE(info.ok()) << info.status().ToString();

  int parts = 0;
  std::lock_guard lock(mu_);
  for (const std::string& req : requests_) {
    if (!req.starts_with("PUT")) continue;
    ++parts;
    const size_t n = req.find("partNumber=");
    ASSERT_NE(n, std::string::npos) << req.substr(0, 200);
    const int number = std::stoi(req.substr(n + 11));
    const std::string body = req.substr(req.find("\r\n\r\n") + 4);
    ASSERT_EQ(body, data.substr(static_cast<size_t>(number - 1) * (5u << 20), 5u << 20))
        << "part " << number;
    if (anonymous) {
      EXPECT_EQ(Header(req, "Content-MD5"), ContentMd5(body)) << "part " << number;
    } else {
      // Signed: the body's SHA-256 is in the header the signature covers.
      EXPECT_EQ(Header(req, "x-amz-content-sha256"), Sha256Hex(body)) << "part " << number;
      EXPECT_NE(Header(req, "Authorization").find("x-amz-content-sha256"), std::string::npos);
    }
  }
  EXPECT_EQ(parts, 3);
}

INSTANTIATE_TEST_SUITE_P(SignedAndAnonymous, S3UploadTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Anonymous" : "Signed"; });

}  // namespace
}  // namespace granary
