// AWS Signature Version 4 request signing (HMAC-SHA256 via OpenSSL).
//
//   canonical request = METHOD \n canonical URI \n canonical query \n
//                       canonical headers \n signed headers \n payload hash
//   string to sign    = "AWS4-HMAC-SHA256" \n amz date \n scope \n hex(sha256(canonical request))
//   signing key       = HMAC chain over "AWS4"+secret, date, region, service, "aws4_request"
//
// Callers pass the headers they want signed (host and x-amz-* at least);
// names are lowercased and values trimmed here. S3 uses
// x-amz-content-sha256: UNSIGNED-PAYLOAD for GET/HEAD and the body's SHA-256
// for PUT. Nothing here logs; the secret never leaves SignV4's stack.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ufs/aws_credentials.h"

namespace granary {

// SHA-256 of the empty string, hex.
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

struct SigV4Request {
  std::string method;           // "GET"
  std::string canonical_uri;    // URI-encoded path, e.g. "/bucket/my%20key" (UriEncodePath)
  std::string canonical_query;  // sorted, encoded "a=1&b=2" (CanonicalQuery)
  std::vector<std::pair<std::string, std::string>> headers;  // headers to sign, host included
  std::string payload_hash;  // hex SHA-256 of the body, or kUnsignedPayload
};

struct SigV4Scope {
  std::string region;    // "us-east-1"
  std::string service;   // "s3"
  std::string amz_date;  // "20130524T000000Z" (UTC); the first 8 chars are the scope date
};

// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// Base64 of the MD5 of `data`: a Content-MD5 header's value, which S3 checks
// an anonymous request's body against.
std::string ContentMd5(std::string_view data);

// RFC 3986 encoding as SigV4 wants it: unreserved A-Z a-z 0-9 - . _ ~ kept,
// everything else %XX (uppercase); '/' kept when !encode_slash.
std::string UriEncode(std::string_view text, bool encode_slash);

// Sorted "k=v&k2=v2" from unencoded pairs (each side encoded with UriEncode).
std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params);

// "20130524T000000Z" for nanoseconds since the epoch (UTC).
std::string AmzDate(int64_t wall_nanos);

// The canonical request text (for tests and debugging without secrets).
std::string CanonicalRequest(const SigV4Request& request);
// "host;range;x-amz-date": sorted lowercase names of request.headers.
std::string SignedHeaders(const SigV4Request& request);
std::string StringToSign(const SigV4Request& request, const SigV4Scope& scope);
// Hex signature.
std::string Signature(const SigV4Request& request, const SigV4Scope& scope,
                      const AwsCredentials& credentials);

// The Authorization header value:
// "AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request,
//  SignedHeaders=...,Signature=...".
std::string AuthorizationHeader(const SigV4Request& request, const SigV4Scope& scope,
                                const AwsCredentials& credentials);

}  // namespace granary
