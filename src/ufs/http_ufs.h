// HttpUfs: read-only UnderStorage over plain HTTP(S) servers (nginx, a CDN,
// python -m http.server, a presigned-URL gateway).
//
// The root is "http(s)://host[:port]"; a key is the URL path without its
// leading slash, sent as written (percent-escapes the user typed are kept;
// spaces, control and non-ASCII bytes are escaped). Stat is a HEAD request
// (size from Content-Length, mtime from Last-Modified, etag from ETag with
// quotes and the weak marker removed); a server that refuses HEAD (405/501)
// is asked for byte 0 instead and the size read from Content-Range; Read is a GET with
// "Range: bytes=a-b" written straight into the caller's buffer (a server that
// ignores Range still works: the window is cut out of the full body). Listing
// is not possible over HTTP and returns Unimplemented.
//
// Errors: 404/410 -> kNotFound, 401/403 -> kPermissionDenied, 416 on a read ->
// end of object (0 bytes). 5xx, 429, timeouts, resets and refused connections
// are retried with jittered exponential backoff (common/retry.h), then
// reported as kUnavailable "<url>: server unreachable after N attempts (why)".
//
// Options (UfsOptions::options; unknown keys are rejected):
//   caBundle        PEM file of CAs for https:// (default: the system store)
//   maxConcurrency  requests in flight at once (default 128)
//   connectTimeout  e.g. "5s" (default 5s)
//   requestTimeout  one whole request, e.g. "120s"; "0" = no limit (default 120s)
//   maxAttempts     tries per request, first included (default 4)
//   maxRetryTime    no retry starts later than this after the first try, e.g.
//                   "120s"; "0" = no limit (default 120s)
//   lowSpeedLimit   bytes/s below which a transfer counts as stalled; "0" = off
//                   (default 1024)
//   lowSpeedTime    how long a stall is tolerated, e.g. "30s" (default 30s)
//
// Thread safety: every method may be called from many threads at once.
#pragma once

#include <memory>

#include "common/clock.h"
#include "common/retry.h"
#include "common/uri.h"
#include "granary/status.h"
#include "ufs/curl_client.h"
#include "ufs/open.h"
#include "ufs/ufs.h"

namespace granary {

struct HttpUfsOptions {
  CurlClientOptions http;  // transport settings
  RetryPolicy retry;       // attempts and backoff for transient failures
};

// Parses UfsOptions into HttpUfsOptions; InvalidArgument naming a bad key or value.
Result<HttpUfsOptions> ResolveHttpOptions(const UfsOptions& options);

// The HTTP connector for uri (scheme kHttp or kHttps; serves uri.Root()).
// `clock` (not owned, must outlive the instance) times retry backoff.
Result<std::unique_ptr<UnderStorage>> NewHttpUfs(const Uri& uri, const UfsOptions& options,
                                                 Clock* clock = Clock::Real());

}  // namespace granary
