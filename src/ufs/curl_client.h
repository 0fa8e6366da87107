// CurlClient: the one HTTP client of Granary's connectors (S3, HTTP), a thin
// wrapper over libcurl's easy interface.
//
// - Connection reuse: easy handles live in a pool and are reset (not closed)
//   between requests, so each keeps its keep-alive connections and DNS cache.
//   TCP_NODELAY and TCP keep-alive are on.
// - Bounded concurrency: at most Options::max_in_flight requests run at once;
//   further callers wait in Send*/SendInto until a slot frees up, at most
//   slot_wait_timeout (then kUnavailable naming the endpoint).
// - Timeouts: connect timeout, whole-request timeout, and a low-speed abort
//   (less than low_speed_bytes/s for low_speed_time), so a peer that accepts
//   and never answers, or trickles bytes, never hangs a caller: every call
//   returns within slot_wait_timeout + request_timeout.
// - Abort(): for shutdown. Running transfers stop within about a second
//   (libcurl's progress callback checks the flag), waiters for a slot wake,
//   and every later call fails at once; all with kCancelled.
// - TLS: ca_bundle (if set) is used for https:// only; http:// URLs ignore it.
//
// Errors: transport failures come back as a Status whose message is libcurl's
// short description ("Couldn't connect to server", "Timeout was reached"), so
// callers can prefix their own context. Connect/timeout/reset/DNS failures are
// kUnavailable (retrying may help); TLS verification and bad-URL failures are
// kIoError / kInvalidArgument. HTTP error statuses (4xx/5xx) are NOT errors at
// this layer: they come back in HttpResponse::status with the error body.
// Nothing here logs URLs, headers or bodies (they may carry signatures).
//
// Thread safety: all methods may be called from many threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/origin_defaults.h"
#include "granary/status.h"

namespace granary {

struct CurlClientOptions {
  int max_in_flight = kDefaultOriginConcurrency;    // requests running at once (>= 1)
  std::chrono::milliseconds connect_timeout{5000};  // TCP (+TLS) connect
  // The whole request, connect to last byte; 0 = no limit.
  std::chrono::milliseconds request_timeout = kDefaultOriginRequestTimeout;
  // Abort a transfer slower than low_speed_bytes/s for low_speed_time (a peer
  // that answers nothing, or trickles a byte a second); 0 bytes = off.
  int64_t low_speed_bytes = kDefaultOriginLowSpeedBytes;
  std::chrono::seconds low_speed_time = kDefaultOriginLowSpeedTime;
  // Longest wait for a free slot when max_in_flight requests are running;
  // 0 = no limit.
  std::chrono::milliseconds slot_wait_timeout = kDefaultOriginRequestTimeout;
  std::string ca_bundle;                                // PEM file for https; "" = system store
  bool follow_redirects = false;                        // follow 3xx (never for signed requests)
  std::string user_agent = "granary/" GRANARY_VERSION;  // User-Agent header
};

// A byte range [offset, offset + length) sent as "Range: bytes=a-b".
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;  // > 0
};

struct HttpRequest {
  std::string method = "GET";                                // GET, HEAD, PUT, POST, DELETE
  std::string url;                                           // absolute http:// or https:// URL
  std::vector<std::pair<std::string, std::string>> headers;  // sent as given
  // Request body (PUT/POST). Borrowed: must stay alive until Send returns.
  std::optional<std::string_view> body;
  std::optional<ByteRange> range;  // adds a Range header
};

struct HttpResponse {
  long status = 0;                             // HTTP status code, e.g. 200, 206, 404
  std::map<std::string, std::string> headers;  // keys lowercased; last value wins
  // Send(): the whole body. SendInto(): the body only when the status is not
  // 2xx (an error document, capped at 64 KiB); otherwise empty.
  std::string body;
  // Bytes of the response body delivered: body.size() for Send(); the bytes
  // written into the caller's span for a 2xx SendInto().
  size_t body_bytes = 0;
  // A 2xx SendInto(): the XXH3-64 of those body_bytes, hashed piece by piece
  // right after each piece was copied in (while it is in the CPU's cache: a
  // cache keeps it as the block's checksum instead of reading the block from
  // memory again). Empty for Send() and error responses.
  std::optional<uint64_t> body_xxh3;
};

class CurlClient {
 public:
  explicit CurlClient(CurlClientOptions options = {});
  ~CurlClient();
  CurlClient(const CurlClient&) = delete;
  CurlClient& operator=(const CurlClient&) = delete;

  // Performs one request and buffers the whole response body.
  Result<HttpResponse> Send(const HttpRequest& request);

  // Performs one request and writes a 2xx body straight into `out` (no extra
  // copy), hashing it as it goes (body_xxh3); at most out.size() bytes are
  // kept, the rest is discarded and the transfer stopped. When request.range is set and the server
  // ignores it (200 with the full object), the requested window is cut out of the stream.
  Result<HttpResponse> SendInto(const HttpRequest& request, std::span<char> out);

  // Stops the client for shutdown: running transfers end within about a
  // second, waiting and later calls fail at once; all with kCancelled.
  // Irreversible. Thread-safe; may be called while requests are running.
  void Abort();

  const CurlClientOptions& options() const { return options_; }

 private:
  // `out` null: buffer the body (Send); otherwise write 2xx bodies into *out.
  Result<HttpResponse> Perform(const HttpRequest& request, std::span<char>* out);
  // A CURL* (null: curl_easy_init failed; the slot is still taken). Waits while
  // max_in_flight are running, at most slot_wait_timeout; kUnavailable naming
  // `url`'s endpoint past that, kCancelled after Abort().
  Result<void*> AcquireHandle(const std::string& url) EXCLUDES(mu_);
  void ReleaseHandle(void* handle) EXCLUDES(mu_);

  CurlClientOptions options_;
  std::atomic<bool> aborted_{false};         // set once by Abort(); read by the progress callback
  Mutex mu_;                                 // guards idle_, in_flight_; leaf lock
  CondVar slot_freed_;                       // signalled when a slot is released or on Abort()
  std::vector<void*> idle_ GUARDED_BY(mu_);  // idle CURL* easy handles (keep their connections)
  int in_flight_ GUARDED_BY(mu_) = 0;
};

}  // namespace granary
