// CurlClient implementation: pooled libcurl easy handles, a counting gate for
// in-flight requests, header and body callbacks. See curl_client.h.
#include "ufs/curl_client.h"

#include <curl/curl.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>

namespace granary {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;
constexpr long kReceiveBufferBytes = 256L << 10;  // curl allows up to 10 MiB

void GlobalInitOnce() {
  static const bool done = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return true;
  }();
  (void)done;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// `code` as a Status. For a timeout, `detail` (libcurl's error buffer: "Operation
// too slow. Less than 1024 bytes/sec transferred the last 30 seconds") says
// which limit ended the request and is appended.
Status CurlStatus(CURLcode code, const char* detail) {
  std::string text = curl_easy_strerror(code);
  if (code == CURLE_OPERATION_TIMEDOUT && detail != nullptr && detail[0] != '\0') {
    text += " (" + std::string(detail) + ")";
  }
  switch (code) {
    case CURLE_ABORTED_BY_CALLBACK:
      return Cancelled("request aborted: the connector is shutting down");
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL: return InvalidArgument(std::move(text));
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR: return IoError(std::move(text));
    default:
      // Connect refused, DNS, timeouts, resets, TLS handshake hiccups, partial
      // transfers: all transient from a caller's point of view.
      return Unavailable(std::move(text));
  }
}

}  // namespace

CurlClient::CurlClient(CurlClientOptions options) : options_(std::move(options)) {
  GlobalInitOnce();
  options_.max_in_flight = std::max(1, options_.max_in_flight);
}

CurlClient::~CurlClient() {
  MutexLock lock(mu_);
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
  idle_.clear();
}

namespace {

// "scheme://host[:port]" of `url`, without userinfo or path: names the origin
// in errors without echoing keys, signatures or credentials.
std::string EndpointOf(std::string_view url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return "origin";
  std::string_view rest = url.substr(scheme_end + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  size_t at = rest.rfind('@');
  if (at != std::string_view::npos) rest.remove_prefix(at + 1);
  return std::string(url.substr(0, scheme_end + 3)) + std::string(rest);
}

// CURLOPT_XFERINFOFUNCTION: libcurl calls it about once a second even while
// waiting for bytes; nonzero ends the transfer with CURLE_ABORTED_BY_CALLBACK.
int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::atomic<bool>*>(user)->load(std::memory_order_relaxed) ? 1 : 0;
}

Status AbortedStatus() { return Cancelled("request aborted: the connector is shutting down"); }

}  // namespace

void CurlClient::Abort() {
  {
    MutexLock lock(mu_);
    aborted_.store(true);
  }
  slot_freed_.NotifyAll();
}

Result<void*> CurlClient::AcquireHandle(const std::string& url) {
  MutexLock lock(mu_);
  auto ready = [&]()
                   REQUIRES(mu_) { return aborted_.load() || in_flight_ < options_.max_in_flight; };
  if (options_.slot_wait_timeout.count() > 0) {
    if (!slot_freed_.WaitFor(lock, options_.slot_wait_timeout, ready)) {
      return Unavailable(EndpointOf(url) + ": no request slot free within " +
                         std::to_string(options_.slot_wait_timeout.count()) + " ms (all " +
                         std::to_string(options_.max_in_flight) +
                         " requests in flight are stuck or slow)");
    }
  } else {
    slot_freed_.Wait(lock, ready);
  }
  if (aborted_.load()) return AbortedStatus();
  ++in_flight_;
  if (!idle_.empty()) {
    void* h = idle_.back();
    idle_.pop_back();
    return h;
  }
  lock.Unlock();
  return static_cast<void*>(curl_easy_init());
}

void CurlClient::ReleaseHandle(void* handle) {
  {
    MutexLock lock(mu_);
    --in_flight_;
    if (handle != nullptr) idle_.push_back(handle);
  }
  slot_freed_.NotifyOne();
}

namespace {

// Per-request state shared with libcurl's callbacks.
struct Transfer {
  CURL* handle = nullptr;
  HttpResponse response;
  std::span<char>* out = nullptr;  // SendInto: where 2xx bodies go
  bool window_known = false;       // window_start decided (status known)
  bool keep_in_span = false;       // this response's body goes to *out
  uint64_t window_start = 0;       // first stream byte to keep (server ignored Range)
  uint64_t stream_pos = 0;         // body bytes seen so far
  bool window_full = false;        // stopped on purpose after filling *out
  std::optional<ByteRange> range;
  // SendInto: a running XXH3-64 over *out's bytes, in order as they arrive.
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash{nullptr, XXH3_freeState};
  uint64_t hashed = 0;      // bytes of *out hashed so far
  std::string_view upload;  // PUT/POST body not yet sent
};

size_t OnHeader(char* data, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * nitems);
  if (line.starts_with("HTTP/")) {
    t->response.headers.clear();  // a new response (after 100-continue or a redirect)
    return size * nitems;
  }
  auto colon = line.find(':');
  if (colon != std::string_view::npos) {
    t->response.headers[Lower(Trim(line.substr(0, colon)))] =
        std::string(Trim(line.substr(colon + 1)));
  }
  return size * nitems;
}

// Decides, at the first body byte, where this response's body goes.
void DecideWindow(Transfer* t) {
  long code = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &code);
  t->keep_in_span = code >= 200 && code < 300;
  // 200 to a ranged request: the server sent the whole object; cut the window.
  t->window_start = (code == 200 && t->range) ? t->range->offset : 0;
  t->window_known = true;
}

size_t OnBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  if (t->out == nullptr) {
    t->response.body.append(data, n);
    return n;
  }
  if (!t->window_known) DecideWindow(t);
  if (!t->keep_in_span) {
    size_t room = kMaxErrorBody - std::min(kMaxErrorBody, t->response.body.size());
    t->response.body.append(data, std::min(room, n));
    return n;
  }
  // Copy the part of [stream_pos, stream_pos + n) that falls in the window.
  const uint64_t begin = t->stream_pos;
  const uint64_t end = begin + n;
  t->stream_pos = end;
  const uint64_t win_begin = t->window_start;
  const uint64_t win_end = win_begin + t->out->size();
  const uint64_t lo = std::max(begin, win_begin);
  const uint64_t hi = std::min(end, win_end);
  if (lo < hi) {
    char* dst = t->out->data() + (lo - win_begin);
    std::memcpy(dst, data + (lo - begin), hi - lo);
    t->response.body_bytes = std::max<size_t>(t->response.body_bytes, hi - win_begin);
    if (t->hash && lo - win_begin == t->hashed) {  // always in order; checked anyway
      XXH3_64bits_update(t->hash.get(), dst, hi - lo);
      t->hashed = hi - win_begin;
    }
  }
  if (end > win_end) {
    t->window_full = true;
    return CURL_WRITEFUNC_ERROR;  // stop: the caller's buffer is full
  }
  return n;
}

size_t OnUpload(char* buffer, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = std::min(size * nitems, t->upload.size());
  std::memcpy(buffer, t->upload.data(), n);
  t->upload.remove_prefix(n);
  return n;
}

void SetMethod(CURL* h, const HttpRequest& request, Transfer* t) {
  if (request.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT" || request.body) {
    t->upload = request.body.value_or(std::string_view());
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, OnUpload);
    curl_easy_setopt(h, CURLOPT_READDATA, t);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(t->upload.size()));
    if (request.method != "PUT") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
}

}  // namespace

Result<HttpResponse> CurlClient::Send(const HttpRequest& request) {
  return Perform(request, nullptr);
}

Result<HttpResponse> CurlClient::SendInto(const HttpRequest& request, std::span<char> out) {
  return Perform(request, &out);
}

Result<HttpResponse> CurlClient::Perform(const HttpRequest& request, std::span<char>* out) {
  if (!request.url.starts_with("http://") && !request.url.starts_with("https://")) {
    return InvalidArgument("url '" + request.url + "': expected http:// or https://");
  }
  if (request.range && request.range->length == 0) {
    return InvalidArgument("http range: length must be > 0");
  }
  ASSIGN_OR_RETURN(void* acquired, AcquireHandle(request.url));
  CURL* h = static_cast<CURL*>(acquired);
  if (h == nullptr) {
    ReleaseHandle(nullptr);
    return Internal("curl_easy_init failed");
  }
  curl_easy_reset(h);  // keeps live connections and the DNS cache
  Transfer t{.handle = h, .out = out, .range = request.range};
  if (out != nullptr) {
    t.hash.reset(XXH3_createState());
    if (t.hash) XXH3_64bits_reset(t.hash.get());
  }

  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  // A whole ~110 KB image in one or two recv() calls instead of seven 16 KiB
  // ones, each after its own poll(): measured 12 polls and 7.5 recvfrom per
  // object with curl's default.
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, kReceiveBufferBytes);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout.count()));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options_.low_speed_bytes));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options_.low_speed_time.count()));
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &aborted_);
  char error_text[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_text);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, options_.follow_redirects ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, options_.user_agent.c_str());
  if (request.url.starts_with("https://") && !options_.ca_bundle.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO, options_.ca_bundle.c_str());
  }
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  SetMethod(h, request, &t);

  curl_slist* headers = nullptr;
  for (const auto& [k, v] : request.headers) {
    headers = curl_slist_append(headers, (k + ": " + v).c_str());
  }
  if (request.range) {
    const ByteRange& r = *request.range;
    headers = curl_slist_append(headers, ("Range: bytes=" + std::to_string(r.offset) + "-" +
                                          std::to_string(r.offset + r.length - 1))
                                             .c_str());
  }
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip on PUT
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);

  CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t.response.status);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  if (rc == CURLE_WRITE_ERROR && t.window_full) rc = CURLE_OK;
  // A handle whose transfer failed may hold a broken connection: drop it.
  if (rc != CURLE_OK) {
    curl_easy_cleanup(h);
    h = nullptr;
  }
  ReleaseHandle(h);
  if (rc != CURLE_OK) return CurlStatus(rc, error_text);
  if (out == nullptr) t.response.body_bytes = t.response.body.size();
  if (t.hash && t.keep_in_span && t.hashed == t.response.body_bytes) {
    t.response.body_xxh3 = XXH3_64bits_digest(t.hash.get());
  }
  return std::move(t.response);
}

}  // namespace granary
