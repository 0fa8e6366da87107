// S3Ufs: the UnderStorage for S3-compatible object stores (AWS S3, MinIO,
// Ceph RGW, OSS/BOS S3 endpoints, moto).
//
// Requests: ListObjectsV2 (paged by continuation token), HEAD, ranged GET
// written straight into the caller's buffer, PUT and CreateBucket. Requests
// are signed with AWS Signature V4 (src/ufs/sigv4.h) unless anonymous.
// Addressing: path-style (http://host/bucket/key) or virtual-host
// (http://bucket.host/key); "auto" picks path-style when the endpoint host is
// an IP address or localhost.
// Credentials: every signed request asks the AwsCredentialsProvider for the
// current ones. An answer that says they expired (ExpiredToken, InvalidToken,
// TokenRefreshRequired; for HEAD, which has no error body, a 400) makes the provider re-fetch them
// and the request is sent once more with the new ones. Errors: 404 NoSuchBucket / NoSuchKey ->
// kNotFound, 403 -> kPermissionDenied naming the S3 error code, 5xx / SlowDown / timeouts / resets
// / refused connections are retried with jittered exponential backoff (common/retry.h) and then
// reported as kUnavailable "... unreachable after N attempts (why)". Connections are reused through
// one CurlClient whose in-flight requests are bounded by S3Options::max_concurrency.
//
// Thread safety: every method may be called from many threads at once.
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/origin_defaults.h"
#include "common/retry.h"
#include "common/uri.h"
#include "granary/status.h"
#include "ufs/aws_credentials.h"
#include "ufs/curl_client.h"
#include "ufs/open.h"
#include "ufs/ufs.h"

namespace granary {

// How bucket names go into request URLs.
enum class S3Addressing {
  kAuto,     // path-style for IP-address or localhost endpoints, virtual-host otherwise
  kPath,     // http://endpoint/bucket/key
  kVirtual,  // http://bucket.endpoint/key
};

// Settings of one S3 connector; see docs/configuration.md "## S3 options".
struct S3Options {
  std::string endpoint;  // "http(s)://host[:port]"; "" = https://s3.<region>.amazonaws.com
  std::string region = "us-east-1";  // signing region
  S3Addressing addressing = S3Addressing::kAuto;
  bool anonymous = false;  // send unsigned requests (public buckets)
  std::string ca_bundle;   // PEM CA file for https endpoints; "" = system store
  int max_concurrency = kDefaultOriginConcurrency;  // requests in flight at once
  std::chrono::milliseconds connect_timeout{5000};  // TCP/TLS connect
  // One whole request (0 = no limit); also the longest wait for a request slot.
  std::chrono::milliseconds request_timeout = kDefaultOriginRequestTimeout;
  int64_t low_speed_bytes = kDefaultOriginLowSpeedBytes;  // stalled below this many bytes/s...
  std::chrono::seconds low_speed_time = kDefaultOriginLowSpeedTime;  // ...for this long (0 B = off)
  RetryPolicy retry;           // attempts and backoff for transient failures
  AwsCredentials credentials;  // used unless anonymous, when credentials_provider is null
  // Where signed requests get credentials from (refreshed ahead of expiry and
  // after an ExpiredToken answer); null = the static `credentials` above.
  std::shared_ptr<AwsCredentialsProvider> credentials_provider;

  // InvalidArgument naming the field and value.
  Status Validate() const;
};

// Builds S3Options from UfsOptions (options + secrets), the environment and the
// AWS shared files (ufs/aws_credentials.h). Unknown option keys or bad values
// give InvalidArgument naming them. No credentials anywhere -> anonymous.
Result<S3Options> ResolveS3Options(const UfsOptions& ufs_options,
                                   const EnvLookup& env = ProcessEnv);

class S3Ufs : public UnderStorage {
 public:
  // Serves `bucket`. `clock` (not owned, outlives this) times retry backoff.
  S3Ufs(std::string bucket, S3Options options, Clock* clock = Clock::Real());
  ~S3Ufs() override;

  std::string Root() const override;  // "s3://bucket"
  void Abort() override;
  bool BoundsRequestTime() const override { return true; }  // curl's timeouts

  // Uploads one object (single PUT; the body is hashed into the signature).
  Status PutObject(std::string_view key, std::string_view data);

  // Creates the bucket; OK when it already exists and is ours. For tests,
  // the demo and the data generator.
  Status CreateBucket();

  const S3Options& options() const { return options_; }

 protected:
  Result<ListPage> ListImpl(const ListRequest& request) override;
  Result<ObjectInfo> StatImpl(std::string_view key) override;
  Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                          std::string_view if_match, std::optional<uint64_t>* xxh3) override;
  // One PUT (size <= part_size) or a multipart upload of every part at once
  // (see UnderStorage::Write).
  Result<ObjectInfo> WriteImpl(std::string_view key, int fd, uint64_t size,
                               const WriteOptions& options) override;
  Status DeleteImpl(std::string_view key) override;
  // Multipart uploads fed part by part (s3_upload.cc).
  Result<std::unique_ptr<StreamingUpload>> StartUploadImpl(std::string_view key, int fd,
                                                           const WriteOptions& options) override;
  Status AbortUploadImpl(std::string_view key, std::string_view upload_id) override;

 private:
  struct Target;  // a URL and the canonical pieces that get signed
  Target MakeTarget(std::string_view key, std::string_view query) const;
  // Signs and sends with retries. `what` names the object in error messages.
  // `into`: write a 2xx body into it (ranged GET) instead of buffering.
  // `extra`: more headers, sent unsigned (Content-MD5).
  using Headers = std::vector<std::pair<std::string, std::string>>;
  Result<HttpResponse> Execute(const std::string& method, std::string_view key,
                               std::string_view query, std::string_view body,
                               std::optional<ByteRange> range, std::span<char>* into,
                               const std::string& what, const Headers* extra = nullptr);
  // `credentials`: null when anonymous.
  Result<HttpResponse> SendOnce(const std::string& method, std::string_view key,
                                std::string_view query, std::string_view body,
                                std::optional<ByteRange> range, std::span<char>* into,
                                const AwsCredentials* credentials, const Headers* extra);
  // The status of a failed answer `r` about `what`; `missing`: the S3 error
  // code that means "not found" here.
  static Status S3Error(const HttpResponse& r, const std::string& what, std::string_view missing);
  // The header that lets the origin check an upload's body (s3_upload.cc).
  Headers BodyChecksum(std::string_view body) const;
  // Multipart pieces (s3_upload.cc).
  class Upload;  // a StreamingUpload
  Result<std::string> UploadPart(std::string_view key, const std::string& upload_id, int number,
                                 int fd, uint64_t offset, uint64_t length, const std::string& what);
  // Aborts, logging (not returning) a failure.
  void AbortMultipart(std::string_view key, const std::string& upload_id, const std::string& what);

  std::string bucket_;
  S3Options options_;
  Clock* clock_;
  bool path_style_;
  std::string endpoint_;  // resolved, without a trailing slash
  std::unique_ptr<CurlClient> http_;
  std::shared_ptr<AwsCredentialsProvider> credentials_;  // null when anonymous
  Mutex rng_mu_;                                         // guards rng_; leaf lock
  std::mt19937_64 rng_ GUARDED_BY(rng_mu_);
};

// The S3 connector for uri (scheme kS3; serves uri.bucket). Called by
// OpenUnderStorage. InvalidArgument for unknown options or bad values.
Result<std::unique_ptr<UnderStorage>> NewS3Ufs(const Uri& uri, const UfsOptions& options);

}  // namespace granary
