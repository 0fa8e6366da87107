// Socket helpers (see socket.h).
#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace granary::net {
namespace {

// Milliseconds to wait in poll() for `deadline`: -1 forever, 0 past it.
int PollTimeout(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Waits for `events` on fd. Unavailable("timed out") past the deadline.
Status WaitFor(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{.fd = fd, .events = events};
    int rc = ::poll(&p, 1, PollTimeout(deadline));
    if (rc > 0) return Status::Ok();
    if (rc == 0) return Unavailable("timed out");
    if (errno != EINTR) return IoError(std::string("poll: ") + std::strerror(errno));
  }
}

Status SocketError(std::string_view what, int err) {
  std::string msg = std::string(what) + ": " + std::strerror(err);
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
    case ENOTCONN: return Unavailable(std::move(msg));
    default: return IoError(std::move(msg));
  }
}

void Tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string FormatAddress(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
  port = ntohs(a->sin_port);
  return std::string(host) + ":" + std::to_string(port);
}

Result<addrinfo*> Resolve(const std::string& address, bool passive) {
  ASSIGN_OR_RETURN(HostPort hp,
                   SplitHostPort(address, passive ? "listen address" : "peer address"));
  if (hp.host.empty() && passive) hp.host = "0.0.0.0";
  addrinfo hints{.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0),
                 .ai_family = AF_UNSPEC,
                 .ai_socktype = SOCK_STREAM};
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &res); rc != 0) {
    std::string msg = "address '" + address + "': " + ::gai_strerror(rc);
    if (rc == EAI_AGAIN) return Unavailable(std::move(msg));
    return InvalidArgument(std::move(msg));
  }
  return res;
}

}  // namespace

Result<HostPort> SplitHostPort(std::string_view address, std::string_view what) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) {
    return InvalidArgument(std::string(what) + " '" + std::string(address) +
                           "': expected HOST:PORT");
  }
  std::string host(address.substr(0, colon));
  std::string port(address.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) > 65535) {
    return InvalidArgument(std::string(what) + " '" + std::string(address) +
                           "': port must be a number from 0 to 65535");
  }
  return HostPort{.host = std::move(host), .port = std::move(port)};
}

Result<int> ListenTcp(const std::string& address, int backlog, std::string* bound) {
  ASSIGN_OR_RETURN(addrinfo * res, Resolve(address, /*passive=*/true));
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
    int err = errno;
    ::freeaddrinfo(res);
    if (fd >= 0) ::close(fd);
    return ErrnoStatus("listen address '" + address + "'", err);
  }
  ::freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (bound) *bound = FormatAddress(ss);
  return fd;
}

int AcceptTcp(int listen_fd, std::string* peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int fd =
      ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return -1;
  Tune(fd);
  if (peer) *peer = FormatAddress(ss);
  return fd;
}

Result<int> ConnectTcp(const std::string& address, Deadline deadline) {
  ASSIGN_OR_RETURN(addrinfo * res, Resolve(address, /*passive=*/false));
  Status last = Unavailable("no address to connect to");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = SocketError("socket", errno);
      continue;
    }
    Tune(fd);
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (Status w = WaitFor(fd, POLLOUT, deadline); !w.ok()) {
        ::close(fd);
        last = w.code() == Code::kUnavailable ? Unavailable("connect timed out") : w;
        break;  // the deadline is spent: no time for other addresses
      }
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    last = SocketError("connect", err);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

Status SendAll(int fd, const std::vector<std::string_view>& parts, Deadline deadline, bool more) {
  std::vector<iovec> iov;
  iov.reserve(parts.size());
  for (auto p : parts) {
    if (!p.empty()) iov.push_back({const_cast<char*>(p.data()), p.size()});
  }
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = &iov[first];
    msg.msg_iovlen = iov.size() - first;
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return SocketError("send", errno);
      RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline));
      continue;
    }
    for (size_t left = static_cast<size_t>(n); left > 0 && first < iov.size();) {
      size_t take = std::min(left, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      left -= take;
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return Status::Ok();
}

Status SendFileRange(int sock, int file, uint64_t offset, uint64_t length, Deadline deadline) {
  off_t off = static_cast<off_t>(offset);
  uint64_t left = length;
  while (left > 0) {
    ssize_t n = ::sendfile(sock, file, &off, std::min<uint64_t>(left, 1u << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return SocketError("sendfile", errno);
      RETURN_IF_ERROR(WaitFor(sock, POLLOUT, deadline));
      continue;
    }
    if (n == 0) return IoError("sendfile: file ended " + std::to_string(left) + " bytes early");
    left -= static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Result<size_t> RecvSome(int fd, char* buf, size_t n, Deadline deadline) {
  for (;;) {
    ssize_t got = ::recv(fd, buf, n, 0);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return SocketError("recv", errno);
    RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline));
  }
}

void ShutdownSocket(int fd) { ::shutdown(fd, SHUT_RDWR); }

}  // namespace granary::net
