// S3Ufs implementation: option resolution, URL building and addressing,
// signing, retries, response parsing (s3_list_parse.h) and error mapping. See s3_ufs.h.
#include "ufs/s3_ufs.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <pugixml.hpp>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/units.h"
#include "ufs/s3_list_parse.h"
#include "ufs/sigv4.h"

namespace granary {
namespace {

const std::set<std::string, std::less<>> kOptionKeys = {
    "endpoint",         "region",       "addressing",      "anonymous",
    "profile",          "caBundle",     "maxConcurrency",  "connectTimeout",
    "requestTimeout",   "maxAttempts",  "accessKeyIdFile", "secretAccessKeyFile",
    "sessionTokenFile", "maxRetryTime", "lowSpeedLimit",   "lowSpeedTime"};
const std::set<std::string, std::less<>> kSecretKeys = {"accessKeyId",         "secretAccessKey",
                                                        "sessionToken",        "accessKeyIdFile",
                                                        "secretAccessKeyFile", "sessionTokenFile"};

// "https://host:port/..." -> "host:port".
std::string_view Authority(std::string_view endpoint) {
  auto scheme_end = endpoint.find("://");
  std::string_view rest =
      endpoint.substr(scheme_end == std::string_view::npos ? 0 : scheme_end + 3);
  return rest.substr(0, rest.find('/'));
}

// "host:port" -> "host"; "[::1]:9000" -> "::1".
std::string HostOnly(std::string_view authority) {
  if (authority.starts_with("[")) {
    return std::string(authority.substr(1, authority.find(']') - 1));
  }
  return std::string(authority.substr(0, authority.find(':')));
}

bool IsIpOrLocalhost(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return host == "localhost" || inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

Result<int> ParseInt(const std::string& key, const std::string& value, int min, int max) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < min || v > max) {
    return InvalidArgument("s3 option " + key + ": '" + value + "' is not an integer in [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<int>(v);
}

Result<std::chrono::milliseconds> ParseMillis(const std::string& key, const std::string& value) {
  auto d = ParseDuration(value);
  if (!d.ok()) return InvalidArgument("s3 option " + key + ": " + d.status().message());
  return std::chrono::duration_cast<std::chrono::milliseconds>(*d);
}

Result<bool> ParseBool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no" || value.empty()) return false;
  return InvalidArgument("s3 option " + key + ": '" + value + "' is not true or false");
}

Status CheckKeys(const UfsOptions& o) {
  for (const auto& [k, v] : o.options) {
    if (!kOptionKeys.contains(k)) {
      return InvalidArgument("s3 option '" + k +
                             "': unknown (see docs/configuration.md, \"S3 options\")");
    }
  }
  for (const auto& [k, v] : o.secrets) {
    if (!kSecretKeys.contains(k)) {
      return InvalidArgument("s3 secret '" + k +
                             "': unknown (expected accessKeyId, secretAccessKey or sessionToken)");
    }
  }
  return Status::Ok();
}

// Applies the numeric and enum settings of `opts` onto `out`.
Status ApplyTunables(const std::map<std::string, std::string>& opts, S3Options& out) {
  for (const auto& [k, v] : opts) {
    if (k == "addressing") {
      if (v == "auto")
        out.addressing = S3Addressing::kAuto;
      else if (v == "path")
        out.addressing = S3Addressing::kPath;
      else if (v == "virtual")
        out.addressing = S3Addressing::kVirtual;
      else
        return InvalidArgument("s3 option addressing: '" + v +
                               "' (expected auto, path or virtual)");
    } else if (k == "anonymous") {
      ASSIGN_OR_RETURN(out.anonymous, ParseBool(k, v));
    } else if (k == "maxConcurrency") {
      ASSIGN_OR_RETURN(out.max_concurrency, ParseInt(k, v, 1, 4096));
    } else if (k == "maxAttempts") {
      ASSIGN_OR_RETURN(out.retry.max_attempts, ParseInt(k, v, 1, 100));
    } else if (k == "connectTimeout") {
      ASSIGN_OR_RETURN(out.connect_timeout, ParseMillis(k, v));
    } else if (k == "requestTimeout") {
      ASSIGN_OR_RETURN(out.request_timeout, ParseMillis(k, v));
    } else if (k == "maxRetryTime") {
      ASSIGN_OR_RETURN(out.retry.max_elapsed, ParseMillis(k, v));
    } else if (k == "lowSpeedLimit") {
      ASSIGN_OR_RETURN(out.low_speed_bytes, ParseInt(k, v, 0, 1 << 30));
    } else if (k == "lowSpeedTime") {
      ASSIGN_OR_RETURN(auto t, ParseMillis(k, v));
      out.low_speed_time =
          std::max(std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::seconds>(t));
    }
  }
  return Status::Ok();
}

// True when S3 refused the request's credentials as expired or invalid, so
// fresh ones may succeed. S3 answers those with 400; a HEAD answer carries no
// error body, so a bodiless 400 to a HEAD counts too (a 403 does not: S3 also
// answers a missing key with 403 when listing is not allowed).
bool CredentialsRefused(const HttpResponse& r, const std::string& method) {
  if (r.status != 400 && r.status != 401 && r.status != 403) return false;
  if (method == "HEAD" && r.body.empty()) return r.status == 400;
  const std::string code = ParseS3Error(r.body).code;
  return code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired" ||
         code == "ExpiredTokenException";
}

std::string HeaderOr(const HttpResponse& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

}  // namespace

Status S3Options::Validate() const {
  // Never echo credentials someone put into the endpoint.
  const std::string shown = StripUserinfo(endpoint);
  if (!endpoint.starts_with("http://") && !endpoint.starts_with("https://")) {
    return InvalidArgument("s3 option endpoint: '" + shown +
                           "' must start with http:// or https://");
  }
  if (Authority(endpoint).find('@') != std::string_view::npos) {
    return InvalidArgument("s3 option endpoint: '" + shown +
                           "': credentials in the URL are not supported (give accessKeyId and "
                           "secretAccessKey, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
  }
  if (Authority(endpoint).empty()) {
    return InvalidArgument("s3 option endpoint: '" + shown + "' has no host");
  }
  if (region.empty()) return InvalidArgument("s3 option region: must not be empty");
  if (max_concurrency < 1) {
    return InvalidArgument("s3 option maxConcurrency: " + std::to_string(max_concurrency) +
                           " must be >= 1");
  }
  if (connect_timeout.count() <= 0) {
    return InvalidArgument("s3 option connectTimeout: must be > 0");
  }
  if (request_timeout.count() < 0) {
    return InvalidArgument("s3 option requestTimeout: must be >= 0");
  }
  return retry.Validate();
}

Result<S3Options> ResolveS3Options(const UfsOptions& ufs_options, const EnvLookup& env) {
  RETURN_IF_ERROR(CheckKeys(ufs_options));
  ASSIGN_OR_RETURN(AwsSettings aws,
                   ResolveAwsSettings(ufs_options.options, ufs_options.secrets, env));
  S3Options out;
  RETURN_IF_ERROR(ApplyTunables(ufs_options.options, out));
  out.region = aws.region;
  out.endpoint =
      aws.endpoint.empty() ? "https://s3." + aws.region + ".amazonaws.com" : aws.endpoint;
  while (out.endpoint.ends_with("/")) out.endpoint.pop_back();
  // An http:// endpoint ignores any CA bundle (from AWS_CA_BUNDLE or elsewhere).
  out.ca_bundle = out.endpoint.starts_with("https://") ? aws.ca_bundle : "";
  if (!out.anonymous) {
    ASSIGN_OR_RETURN(out.credentials_provider, NewAwsCredentialsProvider(aws, env));
    if (out.credentials_provider == nullptr) {
      out.anonymous = true;
    } else {
      ASSIGN_OR_RETURN(auto current, out.credentials_provider->Get());
      out.credentials = *current;
    }
  }
  RETURN_IF_ERROR(out.Validate());
  return out;
}

struct S3Ufs::Target {
  std::string url;            // what curl requests
  std::string host;           // Host header (signed)
  std::string canonical_uri;  // encoded path (signed)
};

S3Ufs::S3Ufs(std::string bucket, S3Options options, Clock* clock)
    : bucket_(std::move(bucket)),
      options_(std::move(options)),
      clock_(clock),
      endpoint_(options_.endpoint),
      rng_(std::random_device{}()) {
  while (endpoint_.ends_with("/")) endpoint_.pop_back();
  switch (options_.addressing) {
    case S3Addressing::kPath: path_style_ = true; break;
    case S3Addressing::kVirtual: path_style_ = false; break;
    case S3Addressing::kAuto:
      // Dotted bucket names break TLS wildcard certificates in virtual-host style.
      path_style_ =
          IsIpOrLocalhost(HostOnly(Authority(endpoint_))) || bucket_.find('.') != std::string::npos;
      break;
  }
  if (!options_.anonymous) {
    credentials_ = options_.credentials_provider != nullptr
                       ? options_.credentials_provider
                       : std::make_shared<AwsCredentialsProvider>(options_.credentials);
  }
  http_ = std::make_unique<CurlClient>(CurlClientOptions{
      .max_in_flight = options_.max_concurrency,
      .connect_timeout = options_.connect_timeout,
      .request_timeout = options_.request_timeout,
      .low_speed_bytes = options_.low_speed_bytes,
      .low_speed_time = options_.low_speed_time,
      .slot_wait_timeout = options_.request_timeout,
      .ca_bundle = options_.ca_bundle,
  });
}

S3Ufs::~S3Ufs() = default;

std::string S3Ufs::Root() const { return "s3://" + bucket_; }

void S3Ufs::Abort() { http_->Abort(); }

S3Ufs::Target S3Ufs::MakeTarget(std::string_view key, std::string_view query) const {
  const std::string_view authority = Authority(endpoint_);
  const std::string scheme(endpoint_.substr(0, endpoint_.find("://") + 3));
  Target t;
  if (path_style_) {
    t.host = std::string(authority);
    t.canonical_uri = "/" + UriEncode(bucket_, true);
    if (!key.empty()) t.canonical_uri += "/" + UriEncode(key, false);
  } else {
    t.host = bucket_ + "." + std::string(authority);
    t.canonical_uri = "/" + UriEncode(key, false);
  }
  t.url = scheme + t.host + t.canonical_uri;
  if (!query.empty()) t.url += "?" + std::string(query);
  return t;
}

Result<HttpResponse> S3Ufs::SendOnce(const std::string& method, std::string_view key,
                                     std::string_view query, std::string_view body,
                                     std::optional<ByteRange> range, std::span<char>* into,
                                     const AwsCredentials* credentials, const Headers* extra) {
  Target target = MakeTarget(key, query);
  HttpRequest req{.method = method, .url = target.url, .range = range};
  const bool has_body = method == "PUT" || method == "POST";
  if (has_body) req.body = body;
  req.headers.emplace_back("Host", target.host);
  if (extra != nullptr) req.headers.insert(req.headers.end(), extra->begin(), extra->end());
  if (credentials != nullptr) {
    const std::string payload = has_body ? Sha256Hex(body) : std::string(kUnsignedPayload);
    SigV4Request sig{.method = method,
                     .canonical_uri = target.canonical_uri,
                     .canonical_query = std::string(query),
                     .headers = {{"host", target.host},
                                 {"x-amz-content-sha256", payload},
                                 {"x-amz-date", AmzDate(clock_->WallNanos())}},
                     .payload_hash = payload};
    if (!credentials->session_token.empty()) {
      sig.headers.emplace_back("x-amz-security-token", credentials->session_token);
    }
    for (size_t i = 1; i < sig.headers.size(); ++i) req.headers.push_back(sig.headers[i]);
    const SigV4Scope scope{
        .region = options_.region, .service = "s3", .amz_date = sig.headers[2].second};
    req.headers.emplace_back("Authorization", AuthorizationHeader(sig, scope, *credentials));
  }
  auto resp = into != nullptr ? http_->SendInto(req, *into) : http_->Send(req);
  if (!resp.ok()) return resp;
  // Server-side trouble is transient: 5xx (503 SlowDown among them) and 429.
  if (resp->status >= 500 || resp->status == 429) {
    auto [code, message] = ParseS3Error(resp->body);
    return Unavailable("HTTP " + std::to_string(resp->status) + (code.empty() ? "" : " " + code));
  }
  return resp;
}

Result<HttpResponse> S3Ufs::Execute(const std::string& method, std::string_view key,
                                    std::string_view query, std::string_view body,
                                    std::optional<ByteRange> range, std::span<char>* into,
                                    const std::string& what, const Headers* extra) {
  uint64_t seed;
  {
    MutexLock lock(rng_mu_);
    seed = rng_();
  }
  std::mt19937_64 rng(seed);
  RetryOutcome outcome;
  std::shared_ptr<const AwsCredentials> used;  // what the last attempt signed with
  const auto attempt = [&]() -> Result<HttpResponse> {
    if (credentials_ != nullptr) {
      ASSIGN_OR_RETURN(used, credentials_->Get());
    }
    return SendOnce(method, key, query, body, range, into, used.get(), extra);
  };
  auto resp = Retry(options_.retry, clock_, rng, attempt, &outcome);
  if (resp.ok() && used != nullptr && CredentialsRefused(*resp, method)) {
    // Expired mid-flight (or revoked early): re-fetch and send once more.
    auto refreshed = credentials_->RefreshAfterRejection(*used);
    if (refreshed.ok() && *refreshed) resp = Retry(options_.retry, clock_, rng, attempt, &outcome);
  }
  if (!resp.ok() && resp.status().code() == Code::kUnavailable) {
    const bool http_error = resp.status().message().starts_with("HTTP ");
    return Unavailable(what + ": endpoint " + endpoint_ +
                       (http_error ? " failed" : " unreachable") + " after " +
                       std::to_string(outcome.attempts) + " attempt" +
                       (outcome.attempts == 1 ? "" : "s") + " (" + resp.status().message() + ")");
  }
  if (!resp.ok()) return Status(resp.status().code(), what + ": " + resp.status().message());
  return resp;
}

// Maps a non-2xx response to a Status naming `what` and the S3 error code.
Status S3Ufs::S3Error(const HttpResponse& r, const std::string& what, std::string_view missing) {
  auto [code, message] = ParseS3Error(r.body);
  const std::string status = std::to_string(r.status);
  const std::string detail = message.empty() ? "" : ": " + message;
  switch (r.status) {
    case 404:
      if (code == "NoSuchBucket")
        return NotFound(what + ": bucket does not exist (404 NoSuchBucket)");
      if (code.empty()) code = std::string(missing);
      if (code == "NoSuchBucket")
        return NotFound(what + ": bucket does not exist (404 NoSuchBucket)");
      return NotFound(what + ": no such key (404 " + code + ")");
    case 401:
    case 403:
      return PermissionDenied(what + ": access denied (" + status + " " +
                              (code.empty() ? "AccessDenied" : code) + detail + ")");
    case 301:
    case 307: {
      std::string region = HeaderOr(r, "x-amz-bucket-region");
      return InvalidArgument(what + ": bucket is served elsewhere (" + status + " " + code + ")" +
                             (region.empty() ? "" : "; set region: " + region));
    }
    case 400: return InvalidArgument(what + ": request rejected (400 " + code + detail + ")");
    default:
      return IoError(what + ": unexpected HTTP " + status + (code.empty() ? "" : " " + code) +
                     detail);
  }
}

Result<ListPage> S3Ufs::ListImpl(const ListRequest& request) {
  std::vector<std::pair<std::string, std::string>> params = {
      {"list-type", "2"}, {"max-keys", std::to_string(request.max_keys)}};
  if (!request.prefix.empty()) params.emplace_back("prefix", request.prefix);
  if (!request.delimiter.empty()) params.emplace_back("delimiter", request.delimiter);
  if (!request.continuation_token.empty()) {
    params.emplace_back("continuation-token", request.continuation_token);
  }
  const std::string what = Root() + "/" + request.prefix;
  ASSIGN_OR_RETURN(HttpResponse r,
                   Execute("GET", "", CanonicalQuery(params), "", std::nullopt, nullptr, what));
  if (r.status != 200) return S3Error(r, what, "NoSuchBucket");
  return ParseListPage(r.body, what);
}

Result<ObjectInfo> S3Ufs::StatImpl(std::string_view key) {
  const std::string what = Root() + "/" + std::string(key);
  if (key.empty()) return InvalidArgument(what + ": empty object key");
  ASSIGN_OR_RETURN(HttpResponse r, Execute("HEAD", key, "", "", std::nullopt, nullptr, what));
  if (r.status == 404) {
    // HEAD carries no error document: ask the bucket whether it exists.
    auto bucket = Execute("HEAD", "", "", "", std::nullopt, nullptr, what);
    if (bucket.ok() && bucket->status == 404) return S3Error(*bucket, what, "NoSuchBucket");
    return S3Error(r, what, "NoSuchKey");
  }
  if (r.status != 200) return S3Error(r, what, "NoSuchKey");
  const std::string length = HeaderOr(r, "content-length");
  std::optional<uint64_t> size = ParseObjectSize(length);
  if (!size) {
    return IoError(what + ": HEAD answered an invalid Content-Length '" + length.substr(0, 40) +
                   "' (expected a decimal number of at most 5 TiB)");
  }
  ObjectInfo info{.key = std::string(key), .size = *size, .etag = UnquoteEtag(HeaderOr(r, "etag"))};
  std::string lm = HeaderOr(r, "last-modified");
  if (!lm.empty()) {
    time_t t = curl_getdate(lm.c_str(), nullptr);
    if (t > 0) info.mtime_ns = static_cast<int64_t>(t) * 1'000'000'000;
  }
  return info;
}

Result<size_t> S3Ufs::ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                               std::string_view if_match, std::optional<uint64_t>* xxh3) {
  const std::string what = Root() + "/" + std::string(key);
  if (key.empty()) return InvalidArgument(what + ": empty object key");
  ASSIGN_OR_RETURN(HttpResponse r,
                   Execute("GET", key, "", "", ByteRange{offset, out.size()}, &out, what));
  if (r.status == 416) return size_t{0};  // the range starts at or past the end
  if (r.status != 200 && r.status != 206) return S3Error(r, what, "NoSuchKey");
  if (!if_match.empty()) {
    // A ranged GET reports the whole object's ETag: a different one means the
    // bytes belong to another version than the snapshot listed.
    const std::string got = UnquoteEtag(HeaderOr(r, "etag"));
    if (!got.empty() && got != if_match) return EtagMismatch(what, if_match, got);
  }
  *xxh3 = r.body_xxh3;
  return r.body_bytes;
}

Status S3Ufs::PutObject(std::string_view key, std::string_view data) {
  const std::string what = Root() + "/" + std::string(key);
  if (key.empty()) return InvalidArgument(what + ": empty object key");
  ASSIGN_OR_RETURN(HttpResponse r, Execute("PUT", key, "", data, std::nullopt, nullptr, what));
  if (r.status != 200) return S3Error(r, what, "NoSuchBucket");
  return Status::Ok();
}

Status S3Ufs::DeleteImpl(std::string_view key) {
  const std::string what = Root() + "/" + std::string(key);
  ASSIGN_OR_RETURN(HttpResponse r, Execute("DELETE", key, "", "", std::nullopt, nullptr, what));
  if (r.status == 204 || r.status == 200 || r.status == 404) return Status::Ok();
  return S3Error(r, what, "NoSuchBucket");
}

Status S3Ufs::CreateBucket() {
  std::string body;
  if (options_.region != "us-east-1") {
    body =
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<LocationConstraint>" +
        options_.region + "</LocationConstraint></CreateBucketConfiguration>";
  }
  ASSIGN_OR_RETURN(HttpResponse r, Execute("PUT", "", "", body, std::nullopt, nullptr, Root()));
  if (r.status == 200) return Status::Ok();
  if (r.status == 409 && ParseS3Error(r.body).code == "BucketAlreadyOwnedByYou")
    return Status::Ok();
  if (r.status == 409) {
    return InvalidArgument(Root() + ": cannot create bucket (409 " + ParseS3Error(r.body).code +
                           ")");
  }
  return S3Error(r, Root(), "NoSuchBucket");
}

Result<std::unique_ptr<UnderStorage>> NewS3Ufs(const Uri& uri, const UfsOptions& options) {
  if (uri.bucket.empty())
    return InvalidArgument("uri '" + uri.ToString() + "': missing bucket name");
  auto resolved = ResolveS3Options(options);
  if (!resolved.ok()) return resolved.status().WithContext(uri.Root());
  GLOG_DEBUG("s3: {} endpoint={} region={} anonymous={}", uri.Root(), resolved->endpoint,
             resolved->region, resolved->anonymous);
  return std::unique_ptr<UnderStorage>(std::make_unique<S3Ufs>(uri.bucket, std::move(*resolved)));
}

}  // namespace granary
