// HttpUfs implementation: HEAD for Stat, ranged GET for Read, retries around
// both. See http_ufs.h for the contract.
#include "ufs/http_ufs.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <random>

#include "common/mutex.h"
#include "common/units.h"

namespace granary {
namespace {

// Percent-escapes the bytes that cannot appear in a URL path as written.
std::string EscapePath(std::string_view key) {
  static constexpr std::string_view kUnsafe = " \"<>\\^`{|}#";
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || kUnsafe.find(ch) != std::string_view::npos) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += ch;
    }
  }
  return out;
}

// "Wed, 21 Oct 2015 07:28:00 GMT" -> nanoseconds since the epoch; 0 if unparsable.
int64_t ParseHttpDate(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
  if (end == nullptr) return 0;
  return static_cast<int64_t>(timegm(&tm)) * 1'000'000'000;
}

// `"abc"` / `W/"abc"` -> `abc`.
std::string CleanEtag(std::string etag) {
  if (etag.starts_with("W/")) etag.erase(0, 2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
    etag = etag.substr(1, etag.size() - 2);
  return etag;
}

// A decimal byte count; nullopt when absent or malformed.
std::optional<uint64_t> ParseLength(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::strtoull(text.c_str(), nullptr, 10);
}

// The total size in "bytes 0-0/12345" or "bytes */0"; nullopt when unknown ("/*").
std::optional<uint64_t> SizeFromContentRange(const std::string& text) {
  size_t slash = text.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  return ParseLength(text.substr(slash + 1));
}

std::string Header(const HttpResponse& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

// The Status for a response that is not a success; Unavailable for retryable ones.
Status ErrorFor(const HttpResponse& r, const std::string& url) {
  const std::string code = "HTTP " + std::to_string(r.status);
  if (r.status >= 500 || r.status == 429) return Unavailable(code);
  if (r.status == 404 || r.status == 410) return NotFound(url + ": not found (" + code + ")");
  if (r.status == 401 || r.status == 403)
    return PermissionDenied(url + ": access denied (" + code + ")");
  return IoError(url + ": unexpected response (" + code + ")");
}

Result<int64_t> ParsePositive(const std::string& key, const std::string& value) {
  char* end = nullptr;
  long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n < 1 || n > 100000) {
    return InvalidArgument("http option " + key + ": '" + value + "' is not a positive integer");
  }
  return static_cast<int64_t>(n);
}

Result<std::chrono::milliseconds> ParseTimeout(const std::string& key, const std::string& value) {
  auto d = ParseDuration(value);
  if (!d.ok()) return InvalidArgument("http option " + key + ": " + d.status().message());
  return std::chrono::duration_cast<std::chrono::milliseconds>(*d);
}

class HttpUfs : public UnderStorage {
 public:
  HttpUfs(std::string root, HttpUfsOptions options, Clock* clock)
      : root_(std::move(root)),
        options_(std::move(options)),
        clock_(clock),
        http_(std::make_unique<CurlClient>(options_.http)),
        rng_(std::random_device{}()) {}

  std::string Root() const override { return root_; }
  void Abort() override { http_->Abort(); }
  bool BoundsRequestTime() const override { return true; }  // curl's timeouts

 protected:
  Result<ListPage> ListImpl(const ListRequest&) override {
    return Unimplemented(root_ + ": listing is not supported over HTTP (use s3:// or a path)");
  }

  Result<ObjectInfo> StatImpl(std::string_view key) override {
    const std::string url = Url(key);
    ASSIGN_OR_RETURN(HttpResponse r,
                     Execute(HttpRequest{.method = "HEAD", .url = url}, nullptr, url));
    std::optional<uint64_t> size;
    if (r.status == 405 || r.status == 501) {
      // HEAD refused: ask for the first byte; Content-Range carries the size.
      char byte;
      std::span<char> one(&byte, 1);
      HttpRequest get{.url = url, .range = ByteRange{.offset = 0, .length = 1}};
      ASSIGN_OR_RETURN(r, Execute(get, &one, url));
      if (r.status == 206 || r.status == 416)
        size = SizeFromContentRange(Header(r, "content-range"));
      if (r.status == 416) r.status = 200;  // an empty object
    }
    if (r.status < 200 || r.status > 299) return ErrorFor(r, url);
    if (!size) size = ParseLength(Header(r, "content-length"));
    if (!size) return IoError(url + ": the server sent no Content-Length, so the size is unknown");
    return ObjectInfo{.key = std::string(key),
                      .size = *size,
                      .mtime_ns = ParseHttpDate(Header(r, "last-modified")),
                      .etag = CleanEtag(Header(r, "etag"))};
  }

  Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                          std::string_view if_match, std::optional<uint64_t>* xxh3) override {
    const std::string url = Url(key);
    HttpRequest req{.url = url, .range = ByteRange{.offset = offset, .length = out.size()}};
    ASSIGN_OR_RETURN(HttpResponse r, Execute(req, &out, url));
    if (r.status == 416) return size_t{0};  // offset at or past the end
    if (r.status < 200 || r.status > 299) return ErrorFor(r, url);
    if (!if_match.empty()) {
      const std::string got = CleanEtag(Header(r, "etag"));
      if (!got.empty() && got != if_match) return EtagMismatch(url, if_match, got);
    }
    *xxh3 = r.body_xxh3;
    return r.body_bytes;
  }

 private:
  std::string Url(std::string_view key) const { return root_ + "/" + EscapePath(key); }

  // Sends with retries; error statuses other than 5xx/429 come back as responses.
  Result<HttpResponse> Execute(const HttpRequest& req, std::span<char>* into,
                               const std::string& url) {
    uint64_t seed;
    {
      MutexLock lock(rng_mu_);
      seed = rng_();
    }
    std::mt19937_64 rng(seed);
    RetryOutcome outcome;
    auto once = [&]() -> Result<HttpResponse> {
      auto r = into != nullptr ? http_->SendInto(req, *into) : http_->Send(req);
      if (r.ok() && (r->status >= 500 || r->status == 429)) return ErrorFor(*r, url);
      return r;
    };
    auto r = Retry(options_.retry, clock_, rng, once, &outcome);
    if (r.ok()) return r;
    if (r.status().code() == Code::kUnavailable) {
      const bool http_error = r.status().message().starts_with("HTTP ");
      return Unavailable(url + ": server " + (http_error ? "failed" : "unreachable") + " after " +
                         std::to_string(outcome.attempts) + " attempt" +
                         (outcome.attempts == 1 ? "" : "s") + " (" + r.status().message() + ")");
    }
    return Status(r.status().code(), url + ": " + r.status().message());
  }

  std::string root_;
  HttpUfsOptions options_;
  Clock* clock_;
  std::unique_ptr<CurlClient> http_;
  Mutex rng_mu_;  // guards rng_; leaf lock
  std::mt19937_64 rng_ GUARDED_BY(rng_mu_);
};

}  // namespace

Result<HttpUfsOptions> ResolveHttpOptions(const UfsOptions& options) {
  HttpUfsOptions out;
  for (const auto& [k, v] : options.options) {
    if (k == "caBundle") {
      out.http.ca_bundle = v;
    } else if (k == "maxConcurrency") {
      ASSIGN_OR_RETURN(int64_t n, ParsePositive(k, v));
      out.http.max_in_flight = static_cast<int>(n);
    } else if (k == "maxAttempts") {
      ASSIGN_OR_RETURN(int64_t n, ParsePositive(k, v));
      out.retry.max_attempts = static_cast<int>(n);
    } else if (k == "connectTimeout") {
      ASSIGN_OR_RETURN(out.http.connect_timeout, ParseTimeout(k, v));
    } else if (k == "requestTimeout") {
      ASSIGN_OR_RETURN(out.http.request_timeout, ParseTimeout(k, v));
      out.http.slot_wait_timeout = out.http.request_timeout;
    } else if (k == "maxRetryTime") {
      ASSIGN_OR_RETURN(out.retry.max_elapsed, ParseTimeout(k, v));
    } else if (k == "lowSpeedLimit") {
      char* end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > (1LL << 30)) {
        return InvalidArgument("http option lowSpeedLimit: '" + v + "' is not a byte rate >= 0");
      }
      out.http.low_speed_bytes = n;
    } else if (k == "lowSpeedTime") {
      ASSIGN_OR_RETURN(auto t, ParseTimeout(k, v));
      out.http.low_speed_time =
          std::max(std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::seconds>(t));
    } else {
      return InvalidArgument("http: unknown option '" + k +
                             "' (known: caBundle, maxConcurrency, maxAttempts, connectTimeout, "
                             "requestTimeout, maxRetryTime, lowSpeedLimit, lowSpeedTime)");
    }
  }
  if (!options.secrets.empty()) {
    return InvalidArgument("http: unexpected secret '" + options.secrets.begin()->first +
                           "' (the HTTP connector takes none)");
  }
  RETURN_IF_ERROR(out.retry.Validate());
  return out;
}

Result<std::unique_ptr<UnderStorage>> NewHttpUfs(const Uri& uri, const UfsOptions& options,
                                                 Clock* clock) {
  if (uri.scheme != Scheme::kHttp && uri.scheme != Scheme::kHttps) {
    return InvalidArgument(uri.ToString() + ": not an http:// or https:// URI");
  }
  ASSIGN_OR_RETURN(HttpUfsOptions resolved, ResolveHttpOptions(options));
  if (uri.scheme == Scheme::kHttp) resolved.http.ca_bundle.clear();
  return std::unique_ptr<UnderStorage>(
      std::make_unique<HttpUfs>(uri.Root(), std::move(resolved), clock));
}

}  // namespace granary
