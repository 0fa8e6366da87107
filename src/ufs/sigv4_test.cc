// SigV4 against AWS's published examples: the S3 "Signature Calculations for
// the Authorization Header" examples (GET Object with Range, PUT Object, GET
// Bucket Lifecycle, ListObjects) and the Signature V4 test suite's get-vanilla
// cases. If any of these break, every request to real S3 fails with
// SignatureDoesNotMatch.
#include "ufs/sigv4.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

const AwsCredentials kS3Example{.access_key_id = "AKIAIOSFODNN7EXAMPLE",
                                .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
const SigV4Scope kS3Scope{.region = "us-east-1", .service = "s3", .amz_date = "20130524T000000Z"};
constexpr const char* kHost = "examplebucket.s3.amazonaws.com";

TEST(SigV4, S3GetObjectWithRangeMatchesAwsExample) {
  SigV4Request req{.method = "GET",
                   .canonical_uri = "/test.txt",
                   .headers = {{"Host", kHost},
                               {"Range", "bytes=0-9"},
                               {"x-amz-content-sha256", std::string(kEmptySha256)},
                               {"x-amz-date", "20130524T000000Z"}},
                   .payload_hash = std::string(kEmptySha256)};
  EXPECT_EQ(
      CanonicalRequest(req),
      "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(StringToSign(req, kS3Scope),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(Signature(req, kS3Scope, kS3Example),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(AuthorizationHeader(req, kS3Scope, kS3Example),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4, S3PutObjectMatchesAwsExample) {
  const std::string payload = Sha256Hex("Welcome to Amazon S3.");
  EXPECT_EQ(payload, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Request req{.method = "PUT",
                   .canonical_uri = "/" + UriEncode("test$file.text", false),
                   .headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                               {"Host", kHost},
                               {"x-amz-date", "20130524T000000Z"},
                               {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                               {"x-amz-content-sha256", payload}},
                   .payload_hash = payload};
  EXPECT_EQ(req.canonical_uri, "/test%24file.text");
  EXPECT_EQ(Signature(req, kS3Scope, kS3Example),
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4, S3GetBucketLifecycleMatchesAwsExample) {
  SigV4Request req{.method = "GET",
                   .canonical_uri = "/",
                   .canonical_query = CanonicalQuery({{"lifecycle", ""}}),
                   .headers = {{"Host", kHost},
                               {"x-amz-content-sha256", std::string(kEmptySha256)},
                               {"x-amz-date", "20130524T000000Z"}},
                   .payload_hash = std::string(kEmptySha256)};
  EXPECT_EQ(req.canonical_query, "lifecycle=");
  EXPECT_EQ(Signature(req, kS3Scope, kS3Example),
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4, S3ListObjectsMatchesAwsExampleWithSortedQuery) {
  SigV4Request req{.method = "GET",
                   .canonical_uri = "/",
                   .canonical_query = CanonicalQuery({{"prefix", "J"}, {"max-keys", "2"}}),
                   .headers = {{"Host", kHost},
                               {"x-amz-content-sha256", std::string(kEmptySha256)},
                               {"x-amz-date", "20130524T000000Z"}},
                   .payload_hash = std::string(kEmptySha256)};
  EXPECT_EQ(req.canonical_query, "max-keys=2&prefix=J");
  EXPECT_EQ(Signature(req, kS3Scope, kS3Example),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// The Signature V4 test suite (service "service", region us-east-1).
const AwsCredentials kSuiteCreds{.access_key_id = "AKIDEXAMPLE",
                                 .secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
const SigV4Scope kSuiteScope{
    .region = "us-east-1", .service = "service", .amz_date = "20150830T123600Z"};

SigV4Request SuiteGet(std::string query) {
  return SigV4Request{
      .method = "GET",
      .canonical_uri = "/",
      .canonical_query = std::move(query),
      .headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
      .payload_hash = std::string(kEmptySha256)};
}

TEST(SigV4, GetVanilla) {
  const auto req = SuiteGet("");
  EXPECT_EQ(SignedHeaders(req), "host;x-amz-date");
  EXPECT_EQ(Signature(req, kSuiteScope, kSuiteCreds),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4, GetVanillaQueryOrderKeyCase) {
  auto req = SuiteGet(CanonicalQuery({{"Param2", "value2"}, {"Param1", "value1"}}));
  EXPECT_EQ(req.canonical_query, "Param1=value1&Param2=value2");
  EXPECT_EQ(Signature(req, kSuiteScope, kSuiteCreds),
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4, UriEncodeKeepsUnreservedAndOptionallySlash) {
  EXPECT_EQ(UriEncode("a b/c~d_e.f-g", false), "a%20b/c~d_e.f-g");
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b%2Fc");
  EXPECT_EQ(UriEncode("é+=&", true), "%C3%A9%2B%3D%26");
}

TEST(SigV4, HeaderValuesAreTrimmedAndSpacesCollapsed) {
  SigV4Request req{.method = "GET",
                   .canonical_uri = "/",
                   .headers = {{"My-Header1", "  value1   a  b  "}, {"Host", "h"}},
                   .payload_hash = "x"};
  EXPECT_EQ(CanonicalRequest(req), "GET\n/\n\nhost:h\nmy-header1:value1 a b\n\nhost;my-header1\nx");
}

TEST(SigV4, AmzDateIsUtc) { EXPECT_EQ(AmzDate(1369353600LL * 1'000'000'000), "20130524T000000Z"); }

}  // namespace
}  // namespace granary
