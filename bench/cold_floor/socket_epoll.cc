// The socket-epoll mode of cold_floor: the TCP floor of receiving one object,
// for reference, not product code. One thread drives --in-flight non-blocking
// keep-alive sockets on a level-triggered epoll set with a minimal HTTP/1.1
// client: GET with Host and Connection: keep-alive, the status line and
// Content-Length parsed from the header, the body received into an aligned
// buffer. A status other than 200 or a length other than --object-size is an
// error; so is a failed syscall. A socket the server closed while idle is
// reopened silently, as an HTTP client would.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string_view>

#include "cold_floor.h"

namespace granary::cold_floor {
namespace {

constexpr size_t kHeaderCap = 8192;   // largest response header accepted
constexpr size_t kHeaderRead = 1024;  // bytes asked per header recv (bounds the body spill)

// Where url-base points: the address to connect to and the request pieces.
struct Origin {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::string host_header;  // "host:port"
  std::string path;         // "/obj/"
};

Origin ParseOrigin(const std::string& url_base) {
  const std::string scheme = "http://";
  if (url_base.rfind(scheme, 0) != 0) Die("--url-base must start with http://: " + url_base);
  std::string rest = url_base.substr(scheme.size());
  size_t slash = rest.find('/');
  Origin o;
  o.host_header = rest.substr(0, slash);
  o.path = slash == std::string::npos ? "/" : rest.substr(slash);
  std::string host = o.host_header, port = "80";
  if (size_t colon = host.rfind(':'); colon != std::string::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    Die("resolve " + o.host_header + ": " + ::gai_strerror(rc));
  }
  std::memcpy(&o.addr, res->ai_addr, res->ai_addrlen);
  o.addr_len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return o;
}

// One keep-alive connection and the response it is receiving.
struct Connection {
  int fd = -1;
  int failures = 0;     // consecutive; the connection retires after kMaxFailures
  uint64_t served = 0;  // responses received on this socket
  uint64_t object = 0;
  bool in_body = false;
  int status = 0;
  size_t content_length = 0;
  size_t header_len = 0;
  size_t body_len = 0;
  char header[kHeaderCap];
  AlignedBuffer body;
};

// Case-insensitive value of header `name` in the raw header block, or "".
std::string_view HeaderValue(std::string_view head, std::string_view name) {
  for (size_t pos = head.find("\r\n"); pos != std::string_view::npos;
       pos = head.find("\r\n", pos + 2)) {
    std::string_view line = head.substr(pos + 2, head.find("\r\n", pos + 2) - (pos + 2));
    if (line.size() > name.size() && line[name.size()] == ':' &&
        ::strncasecmp(line.data(), name.data(), name.size()) == 0) {
      std::string_view v = line.substr(name.size() + 1);
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      return v;
    }
  }
  return {};
}

// The socket-epoll mode: plain HTTP/1.1 GETs on --in-flight non-blocking
// keep-alive sockets, level-triggered epoll, one thread. Headers are read in
// kHeaderRead pieces into Connection::header; the body bytes that came with
// the last header piece (under 1 KB) are copied to the body buffer, the rest
// is received straight into it.
class EpollClient {
 public:
  EpollClient(const Flags& f, const Origin& origin, ErrorLog& log)
      : f_(f), origin_(origin), log_(log), pick_(0, f.objects - 1) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) Die(ErrnoText("epoll_create1", "", errno));
    conns_.resize(f.in_flight);
    for (auto& c : conns_) c.body = NewAligned(f.object_size);
  }
  ~EpollClient() {
    for (auto& c : conns_) Close(c);
    ::close(epoll_);
  }

  // Runs until `w` expires and every response in flight has arrived. Returns
  // the objects received whole with status 200.
  uint64_t Run(const Window& w) {
    window_ = &w;
    for (auto& c : conns_) Begin(c);
    epoll_event events[64];
    while (active_ > 0) {
      int n = ::epoll_wait(epoll_, events, 64, 100);
      if (n < 0 && errno != EINTR) Die(ErrnoText("epoll_wait", "", errno));
      for (int i = 0; i < n; ++i) OnReadable(*static_cast<Connection*>(events[i].data.ptr));
    }
    return ok_;
  }

 private:
  static constexpr int kMaxFailures = 3;

  void Close(Connection& c) {
    if (c.fd >= 0) ::close(c.fd);  // also leaves the epoll set
    c.fd = -1;
  }

  bool Connect(Connection& c) {
    c.served = 0;
    c.fd = ::socket(origin_.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c.fd < 0) return false;
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&origin_.addr), origin_.addr_len) != 0 ||
        ::fcntl(c.fd, F_SETFL, O_NONBLOCK) != 0) {
      return false;
    }
    epoll_event ev{.events = EPOLLIN, .data = {.ptr = &c}};
    return ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &ev) == 0;
  }

  // Sends the next request on `c`, (re)connecting first if needed, or retires
  // `c` once the window has expired or it failed kMaxFailures times in a row.
  void Begin(Connection& c) {
    if (window_->Expired() || c.failures >= kMaxFailures) {
      Close(c);
      return;
    }
    c.object = pick_(rng_);
    c.in_body = false;
    c.header_len = c.body_len = 0;
    ++active_;
    if (c.fd < 0 && !Connect(c)) return Fail(c, ErrnoText("connect", origin_.host_header, errno));
    char request[512];
    int len = std::snprintf(request, sizeof(request),
                            "GET %s%llu HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n\r\n",
                            origin_.path.c_str(), static_cast<unsigned long long>(c.object),
                            origin_.host_header.c_str());
    ssize_t n = ::send(c.fd, request, len, MSG_NOSIGNAL);
    if (n != len) Fail(c, n < 0 ? ErrnoText("send", "request", errno) : "short send of request");
  }

  void Fail(Connection& c, const std::string& what) {
    log_.Report(std::to_string(c.object), what);
    Close(c);
    ++c.failures;
    --active_;
    Begin(c);
  }

  void Reconnect(Connection& c) {  // Connect() starts its count of responses again
    Close(c);
    --active_;
    Begin(c);
  }

  void Finish(Connection& c) {
    --active_;
    ++c.served;
    if (c.status == 200 && c.body_len == f_.object_size) {
      ++ok_;
      c.failures = 0;
    } else {
      log_.Report(std::to_string(c.object), BadResponseText(c.status, c.body_len, f_.object_size));
    }
    Begin(c);
  }

  void OnReadable(Connection& c) {
    if (c.fd < 0) return;  // closed earlier in this batch of events
    if (!c.in_body && !ReadHeader(c)) return;
    ReadBody(c);
  }

  // Receives header bytes; returns true once the whole header is parsed.
  bool ReadHeader(Connection& c) {
    size_t want = std::min(kHeaderRead, kHeaderCap - c.header_len);
    ssize_t n = ::recv(c.fd, c.header + c.header_len, want, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    if (n == 0 && c.header_len == 0 && c.served > 0) {
      Reconnect(c);  // the server closed an idle keep-alive socket: not an error
      return false;
    }
    if (n <= 0) {
      Fail(c, n < 0 ? ErrnoText("recv", "header", errno) : "connection closed in header");
      return false;
    }
    c.header_len += n;
    std::string_view head(c.header, c.header_len);
    size_t end = head.find("\r\n\r\n");
    if (end == std::string_view::npos) {
      if (c.header_len == kHeaderCap) Fail(c, "response header over 8 KB");
      return false;
    }
    head = head.substr(0, end + 2);
    c.status = head.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(head.data() + 9) : 0;
    std::string_view length = HeaderValue(head, "Content-Length");
    c.content_length = std::strtoull(std::string(length).c_str(), nullptr, 10);
    size_t spill = c.header_len - (end + 4);
    if (length.empty() || c.content_length > RoundUp(f_.object_size) || spill > c.content_length) {
      Fail(c, "status " + std::to_string(c.status) + ", bad Content-Length '" +
                  std::string(length) + "'");
      return false;
    }
    std::memcpy(c.body.get(), c.header + end + 4, spill);
    c.body_len = spill;
    c.in_body = true;
    return true;
  }

  // Receives body bytes until the socket runs dry (a short read) or the body
  // is complete.
  void ReadBody(Connection& c) {
    while (c.body_len < c.content_length) {
      size_t want = c.content_length - c.body_len;
      ssize_t n = ::recv(c.fd, c.body.get() + c.body_len, want, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (n <= 0) {
        return Fail(c, n < 0 ? ErrnoText("recv", "body", errno) : "connection closed in body");
      }
      c.body_len += n;
      if (static_cast<size_t>(n) < want && c.body_len < c.content_length) return;
    }
    Finish(c);
  }

  const Flags& f_;
  const Origin& origin_;
  ErrorLog& log_;
  const Window* window_ = nullptr;
  int epoll_ = -1;
  std::vector<Connection> conns_;
  int active_ = 0;  // connections with a request in flight
  uint64_t ok_ = 0;
  std::mt19937_64 rng_{11};
  std::uniform_int_distribution<uint64_t> pick_;
};

}  // namespace

Row RunSocketEpoll(const Flags& f) {
  ErrorLog log("socket-epoll");
  Origin origin = ParseOrigin(f.url_base);
  EpollClient client(f, origin, log);
  Window w;
  w.Open(f.seconds);
  uint64_t ok = client.Run(w);
  return w.Close("socket-epoll", ok, log.count());
}

}  // namespace granary::cold_floor
