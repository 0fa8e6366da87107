#include "s3_delay_proxy/proxy.h"

#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "s3_delay_proxy/http_framing.h"

namespace granary::bench {
namespace {

constexpr size_t kIoChunk = 64 * 1024;
constexpr size_t kMaxHead = 64 * 1024;
constexpr std::string_view kStatsPath = "/__proxy_stats";

bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

ssize_t Recv(int fd, char* buf, size_t n) {
  for (;;) {
    ssize_t r = ::recv(fd, buf, n, 0);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// "http://host:port/..." or "host:port" -> host, port.
Status SplitHostPort(std::string spec, std::string* host, std::string* port) {
  if (auto p = spec.find("://"); p != std::string::npos) spec = spec.substr(p + 3);
  spec = spec.substr(0, spec.find('/'));
  size_t colon = spec.rfind(':');
  *host = colon == std::string::npos ? spec : spec.substr(0, colon);
  *port = colon == std::string::npos ? "80" : spec.substr(colon + 1);
  if (host->empty() || port->empty())
    return InvalidArgument("--upstream '" + spec + "': want host:port");
  return Status::Ok();
}

void SendSimpleResponse(int fd, int code, const char* reason, const std::string& body) {
  std::string resp =
      "HTTP/1.1 " + std::to_string(code) + " " + reason +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  SendAll(fd, resp.data(), resp.size());
}

}  // namespace

struct DelayProxy::Counters {
  std::atomic<uint64_t> connections{0}, requests{0}, get{0}, head{0}, put{0}, other{0};
  std::atomic<uint64_t> to_upstream{0}, to_client{0};
  std::mutex mu;  // guards active_fds, stopping, accept_thread
  std::condition_variable idle;
  std::set<int> active_fds;  // client sockets being served
  bool stopping = false;
  std::thread accept_thread;
};

std::string ProxyStats::ToJson() const {
  auto kv = [](const char* k, uint64_t v) {
    return "\"" + std::string(k) + "\": " + std::to_string(v);
  };
  return "{" + kv("connections", connections) + ", " + kv("requests", requests) + ", " +
         kv("get_requests", get_requests) + ", " + kv("head_requests", head_requests) + ", " +
         kv("put_requests", put_requests) + ", " + kv("other_requests", other_requests) + ", " +
         kv("bytes_to_upstream", bytes_to_upstream) + ", " +
         kv("bytes_to_client", bytes_to_client) + "}";
}

Result<std::unique_ptr<DelayProxy>> DelayProxy::Create(ProxyOptions options) {
  if (options.upstream.empty()) return InvalidArgument("--upstream is required (host:port)");
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("--port " + std::to_string(options.port) + ": must be 0..65535");
  }
  std::string host, port;
  RETURN_IF_ERROR(SplitHostPort(options.upstream, &host, &port));
  addrinfo hints{.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return InvalidArgument("--upstream " + options.upstream + ": " + gai_strerror(rc));
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  socklen_t len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return std::unique_ptr<DelayProxy>(new DelayProxy(std::move(options), addr, len));
}

DelayProxy::DelayProxy(ProxyOptions options, sockaddr_storage upstream, socklen_t upstream_len)
    : options_(std::move(options)),
      upstream_addr_(upstream),
      upstream_len_(upstream_len),
      bucket_(options_.bandwidth, std::max<uint64_t>(kIoChunk, options_.bandwidth / 100)),
      counters_(std::make_unique<Counters>()) {}

DelayProxy::~DelayProxy() {
  std::unique_lock lock(counters_->mu);
  counters_->stopping = true;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  std::thread accept_thread = std::move(counters_->accept_thread);
  lock.unlock();
  if (accept_thread.joinable()) accept_thread.join();
  lock.lock();
  for (int fd : counters_->active_fds) ::shutdown(fd, SHUT_RDWR);
  counters_->idle.wait(lock, [this] { return counters_->active_fds.empty(); });
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Result<int> DelayProxy::Start() {
  addrinfo hints{.ai_flags = AI_PASSIVE, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  addrinfo* res = nullptr;
  std::string port = std::to_string(options_.port);
  if (int rc = ::getaddrinfo(options_.listen_host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return InvalidArgument("--listen " + options_.listen_host + ": " + gai_strerror(rc));
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool ok = fd >= 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 1024) == 0;
  int err = errno;
  ::freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) ::close(fd);
    return ErrnoStatus("listen on " + options_.listen_host + ":" + port, err);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int actual =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::lock_guard lock(counters_->mu);
  listen_fd_ = fd;
  counters_->accept_thread = std::thread([this] { AcceptLoop(); });
  return actual;
}

void DelayProxy::AcceptLoop() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
      return;  // listening socket shut down
    }
    std::lock_guard lock(counters_->mu);
    if (counters_->stopping) {
      ::close(fd);
      return;
    }
    counters_->active_fds.insert(fd);
    ++counters_->connections;
    std::thread([this, fd] { Serve(fd); }).detach();
  }
}

void DelayProxy::Serve(int client_fd) {
  NoDelay(client_fd);
  int up = ::socket(upstream_addr_.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (up < 0 || ::connect(up, reinterpret_cast<sockaddr*>(&upstream_addr_), upstream_len_) != 0) {
    SendSimpleResponse(client_fd, 502, "Bad Gateway",
                       "{\"error\": \"s3_delay_proxy: upstream " + options_.upstream +
                           " refused the connection\"}");
  } else {
    NoDelay(up);
    std::thread pump([this, up, client_fd] { UpstreamToClient(up, client_fd); });
    ClientToUpstream(client_fd, up);
    pump.join();
  }
  if (up >= 0) ::close(up);
  std::lock_guard lock(counters_->mu);
  counters_->active_fds.erase(client_fd);
  ::close(client_fd);
  counters_->idle.notify_all();
}

void DelayProxy::UpstreamToClient(int upstream_fd, int client_fd) {
  char buf[kIoChunk];
  for (;;) {
    ssize_t n = Recv(upstream_fd, buf, sizeof(buf));
    if (n <= 0) break;
    bucket_.Acquire(static_cast<uint64_t>(n));
    if (!SendAll(client_fd, buf, static_cast<size_t>(n))) break;
    counters_->to_client += static_cast<uint64_t>(n);
  }
  // Upstream is done (or the client is gone): end the connection both ways.
  ::shutdown(client_fd, SHUT_RDWR);
  ::shutdown(upstream_fd, SHUT_RDWR);
}

void DelayProxy::ClientToUpstream(int client_fd, int upstream_fd) {
  std::string pending;
  char buf[kIoChunk];
  auto fill = [&]() {
    ssize_t n = Recv(client_fd, buf, sizeof(buf));
    if (n > 0) pending.append(buf, static_cast<size_t>(n));
    return n > 0;
  };
  auto forward = [&](size_t n) {
    bool ok = SendAll(upstream_fd, pending.data(), n);
    counters_->to_upstream += n;
    pending.erase(0, n);
    return ok;
  };
  for (;;) {
    size_t end;
    while ((end = pending.find("\r\n\r\n")) == std::string::npos) {
      if (pending.size() > kMaxHead || !fill()) {
        ::shutdown(upstream_fd, SHUT_WR);  // let upstream finish and close
        return;
      }
    }
    auto arrival = std::chrono::steady_clock::now();
    auto head = ParseRequestHead(std::string_view(pending).substr(0, end + 4));
    if (!head.ok()) {
      SendSimpleResponse(client_fd, 400, "Bad Request",
                         "{\"error\": \"s3_delay_proxy: " + head.status().message() + "\"}");
      ::shutdown(client_fd, SHUT_RDWR);
      return;
    }
    bool local = std::string_view(head->target).starts_with(kStatsPath);
    if (!local) {
      CountRequest(head->method);
      std::this_thread::sleep_until(arrival + options_.delay);
      if (!forward(end + 4)) return;
    } else {
      pending.erase(0, end + 4);
    }
    BodyFramer body(*head);
    while (!body.done()) {
      if (pending.empty() && !fill()) return;
      auto used = body.Consume(pending);
      if (!used.ok()) return;
      if (local) {
        pending.erase(0, *used);
      } else if (!forward(*used)) {
        return;
      }
    }
    if (local && !AnswerStats(client_fd, head->target)) return;
  }
}

bool DelayProxy::AnswerStats(int client_fd, const std::string& target) {
  bool reset = std::string_view(target).substr(kStatsPath.size()).starts_with("/reset");
  ProxyStats s = reset ? ResetStats() : Stats();
  std::string body = s.ToJson() + "\n";
  std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body;
  return SendAll(client_fd, resp.data(), resp.size());
}

void DelayProxy::CountRequest(const std::string& method) {
  ++counters_->requests;
  if (method == "GET") {
    ++counters_->get;
  } else if (method == "HEAD") {
    ++counters_->head;
  } else if (method == "PUT") {
    ++counters_->put;
  } else {
    ++counters_->other;
  }
}

ProxyStats DelayProxy::Stats() const {
  const Counters& c = *counters_;
  return {.connections = c.connections,
          .requests = c.requests,
          .get_requests = c.get,
          .head_requests = c.head,
          .put_requests = c.put,
          .other_requests = c.other,
          .bytes_to_upstream = c.to_upstream,
          .bytes_to_client = c.to_client};
}

ProxyStats DelayProxy::ResetStats() {
  Counters& c = *counters_;
  return {.connections = c.connections.exchange(0),
          .requests = c.requests.exchange(0),
          .get_requests = c.get.exchange(0),
          .head_requests = c.head.exchange(0),
          .put_requests = c.put.exchange(0),
          .other_requests = c.other.exchange(0),
          .bytes_to_upstream = c.to_upstream.exchange(0),
          .bytes_to_client = c.to_client.exchange(0)};
}

}  // namespace granary::bench
