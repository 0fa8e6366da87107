// HTTP/1.1 request framing for s3_delay_proxy: where one request ends and the
// next begins on a keep-alive connection, so a delay can be added per request.
//
// Only framing is parsed — the request line, Content-Length and
// Transfer-Encoding: chunked — never the bytes' meaning; the proxy forwards
// everything verbatim.
//
// Thread safety: values; one BodyFramer per connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary::bench {

struct RequestHead {
  std::string method;           // "GET"
  std::string target;           // "/bucket/key?x=y"
  bool chunked = false;         // Transfer-Encoding: chunked
  uint64_t content_length = 0;  // body bytes when not chunked
};

// Parses a complete head (request line + headers, ending "\r\n\r\n").
// InvalidArgument naming what was malformed.
Result<RequestHead> ParseRequestHead(std::string_view head);

// Tracks a request body and says where it ends.
class BodyFramer {
 public:
  explicit BodyFramer(const RequestHead& head);

  // Consumes up to `data.size()` bytes of body; returns how many belong to
  // this body (the rest is the next request). Malformed chunk framing: error.
  Result<size_t> Consume(std::string_view data);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State {
    kFixed,      // Content-Length body: remaining_ bytes left
    kChunkSize,  // reading a chunk-size line into line_
    kChunkData,  // remaining_ bytes of chunk data left
    kChunkCrlf,  // the CRLF after chunk data: remaining_ bytes left
    kTrailer,    // trailer lines until an empty one
    kDone,       // body complete
  };
  State state_;
  uint64_t remaining_ = 0;
  std::string line_;
};

}  // namespace granary::bench
