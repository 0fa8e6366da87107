// DelayProxy: an HTTP/1.1 TCP proxy on loopback that makes a local S3 server
// (moto_server) behave like remote storage: every request waits `delay`
// before it is forwarded (time to first byte grows by at least `delay`), and
// responses share a bandwidth cap. Bytes pass through unchanged.
//
// Model: one thread per client connection reads requests (framing only:
// request line, Content-Length, chunked), sleeps until head arrival + delay,
// then forwards head and body to its own upstream connection; a second thread
// per connection pumps upstream bytes back through the token bucket. When
// either side closes, both are closed. Requests whose target starts with
// /__proxy_stats are answered by the proxy itself (JSON counters;
// /__proxy_stats/reset also zeroes them) and are not counted or delayed.
//
// Thread safety: Start() once; Stats()/ResetStats() from any thread.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "granary/status.h"
#include "s3_delay_proxy/token_bucket.h"

namespace granary::bench {

struct ProxyOptions {
  std::string listen_host = "127.0.0.1";  // address to listen on
  int port = 0;                           // 0 = pick a free port
  std::string upstream;                   // "host:port" or "http://host:port[/]"
  std::chrono::microseconds delay{0};     // added before each request is forwarded
  uint64_t bandwidth = 0;                 // response bytes/s over all connections; 0 = no cap
};

// Counters since start (or the last reset).
struct ProxyStats {
  uint64_t connections = 0;  // client connections accepted
  uint64_t requests = 0;     // requests forwarded upstream
  uint64_t get_requests = 0;
  uint64_t head_requests = 0;
  uint64_t put_requests = 0;
  uint64_t other_requests = 0;  // POST, DELETE, ...
  uint64_t bytes_to_upstream = 0;
  uint64_t bytes_to_client = 0;
  std::string ToJson() const;
};

class DelayProxy {
 public:
  // Validates options and resolves the upstream address.
  static Result<std::unique_ptr<DelayProxy>> Create(ProxyOptions options);
  ~DelayProxy();

  // Binds and listens; returns the port. Connections are served by a
  // background accept thread until the process exits.
  Result<int> Start();

  ProxyStats Stats() const;
  // Returns the counters and zeroes them.
  ProxyStats ResetStats();

 private:
  struct Counters;
  explicit DelayProxy(ProxyOptions options, sockaddr_storage upstream, socklen_t upstream_len);
  void AcceptLoop();
  void Serve(int client_fd);
  // Forwards requests from client to upstream until either closes.
  void ClientToUpstream(int client_fd, int upstream_fd);
  void UpstreamToClient(int upstream_fd, int client_fd);
  // Answers a /__proxy_stats request on the client socket.
  bool AnswerStats(int client_fd, const std::string& target);
  void CountRequest(const std::string& method);

  ProxyOptions options_;
  sockaddr_storage upstream_addr_;
  socklen_t upstream_len_;
  int listen_fd_ = -1;
  TokenBucket bucket_;
  std::unique_ptr<Counters> counters_;
};

}  // namespace granary::bench
