// WireConn (see wire.h).
#include "control/wire.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace granary {

WireConn::~WireConn() {
  for (int f : fds_) ::close(f);
  if (fd_ >= 0) ::close(fd_);
}

Status WireConn::Send(const nlohmann::json& j, int pass_fd, std::span<const char> payload) {
  std::string line = j.dump();
  line += '\n';
  size_t off = 0;
  bool fd_sent = pass_fd < 0;
  while (off < line.size() || !payload.empty()) {
    std::span<const char> cur =
        off < line.size() ? std::span<const char>(line.data() + off, line.size() - off) : payload;
    struct iovec iov {
      const_cast<char*>(cur.data()), cur.size()
    };
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (!fd_sent) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(std::string("daemon socket: send: ") + strerror(errno));
    }
    fd_sent = true;
    if (off < line.size()) {
      off += static_cast<size_t>(n);
    } else {
      payload = payload.subspan(static_cast<size_t>(n));
    }
  }
  return Status::Ok();
}

Status WireConn::Fill() {
  if (start_ > 0 && start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  } else if (start_ > (1u << 16)) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  const size_t old = buf_.size();
  buf_.resize(old + (1u << 16));
  struct iovec iov {
    buf_.data() + old, 1u << 16
  };
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    buf_.resize(old);
    return IoError(std::string("daemon socket: receive: ") + strerror(errno));
  }
  buf_.resize(old + static_cast<size_t>(n));
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds_.push_back(f);
      }
    }
  }
  if (n == 0) return IoError("daemon socket: the other side closed the connection");
  return Status::Ok();
}

Result<std::string> WireConn::ReadLine(size_t max_bytes) {
  size_t rel = 0;  // bytes after start_ already searched (Fill keeps the unread bytes' order)
  for (;;) {
    size_t nl = buf_.find('\n', start_ + rel);
    if (nl != std::string::npos) {
      std::string line = buf_.substr(start_, nl - start_);
      start_ = nl + 1;
      return line;
    }
    rel = buf_.size() - start_;
    if (rel > max_bytes)
      return InvalidArgument("daemon socket: line longer than " + std::to_string(max_bytes) +
                             " bytes");
    RETURN_IF_ERROR(Fill());
  }
}

Status WireConn::ReadExact(std::span<char> out) {
  size_t done = 0;
  size_t have = std::min(out.size(), buf_.size() - start_);
  std::memcpy(out.data(), buf_.data() + start_, have);
  start_ += have;
  done = have;
  while (done < out.size()) {
    ssize_t n = ::recv(fd_, out.data() + done, out.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(std::string("daemon socket: receive: ") + strerror(errno));
    if (n == 0) return IoError("daemon socket: the other side closed the connection");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<bool> WireConn::Poll(int timeout_ms) {
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  int n = ::poll(&p, 1, timeout_ms);
  if (n < 0 && errno == EINTR) return false;
  if (n < 0) return IoError(std::string("daemon socket: poll: ") + strerror(errno));
  if (n == 0) return false;
  RETURN_IF_ERROR(Fill());
  return true;
}

int WireConn::TakeFd() {
  if (fds_.empty()) return -1;
  int f = fds_.front();
  fds_.erase(fds_.begin());
  return f;
}

nlohmann::json ErrorJson(const Status& s) {
  return {{"ok", false}, {"code", static_cast<int>(s.code())}, {"error", s.message()}};
}

Status StatusFromReply(const nlohmann::json& reply) {
  if (!reply.is_object()) return IoError("daemon socket: malformed reply (not an object)");
  auto ok = reply.find("ok");
  if (ok != reply.end() && ok->is_boolean() && ok->get<bool>()) return Status::Ok();
  int code = static_cast<int>(Code::kIoError);
  if (auto c = reply.find("code"); c != reply.end() && c->is_number_integer()) code = c->get<int>();
  if (code <= 0 || code > static_cast<int>(Code::kStale)) code = static_cast<int>(Code::kIoError);
  std::string msg = "daemon error";
  if (auto e = reply.find("error"); e != reply.end() && e->is_string()) msg = e->get<std::string>();
  return Status(static_cast<Code>(code), msg);
}

}  // namespace granary
