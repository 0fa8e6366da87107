// Holder channel and control-socket client (see holder_channel.h).
#include "daemon/holder_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "daemon/daemon.h"

namespace granary {

Status SendHolderMessage(int sock, const nlohmann::json& body, const std::vector<int>& fds) {
  const std::string text = body.dump();
  if (text.size() > kHolderMessageMax) return InvalidArgument("holder message too large");
  if (fds.size() > kHolderMaxFds) return InvalidArgument("holder message: too many fds");
  iovec iov{.iov_base = const_cast<char*>(text.data()), .iov_len = text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kHolderMaxFds)];
  if (!fds.empty()) {
    const size_t bytes = sizeof(int) * fds.size();
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(bytes);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(bytes);
    std::memcpy(CMSG_DATA(c), fds.data(), bytes);
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("holder channel: send", errno);
  return Status::Ok();
}

Result<HolderMessage> ReceiveHolderMessage(int sock) {
  std::string text(kHolderMessageMax, '\0');
  iovec iov{.iov_base = text.data(), .iov_len = text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kHolderMaxFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("holder channel: receive", errno);
  HolderMessage out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const size_t at = out.fds.size();
    out.fds.resize(at + count);
    std::memcpy(out.fds.data() + at, CMSG_DATA(c), count * sizeof(int));
  }
  auto close_fds = [&out] {
    for (int fd : out.fds) ::close(fd);
  };
  if (n == 0) {
    close_fds();
    return NotFound("holder channel closed");
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    close_fds();
    return Corruption("holder channel: message truncated");
  }
  text.resize(static_cast<size_t>(n));
  out.body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!out.body.is_object() || !out.body.contains("op") || !out.body["op"].is_string()) {
    close_fds();
    return Corruption("holder channel: malformed message");
  }
  return out;
}

Result<std::shared_ptr<HolderChannel>> HolderChannel::FromEnvironment() {
  const char* text = std::getenv(kHolderFdEnv);
  if (text == nullptr) return std::shared_ptr<HolderChannel>();
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  ::unsetenv(kHolderFdEnv);
  if (end == text || *end != '\0' || fd < 3 || fd > 65535 ||
      ::fcntl(static_cast<int>(fd), F_GETFD) < 0) {
    return InvalidArgument(std::string(kHolderFdEnv) + " does not name an open descriptor");
  }
  ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  return std::make_shared<HolderChannel>(static_cast<int>(fd));
}

HolderChannel::~HolderChannel() { ::close(fd_); }

Result<std::optional<HeldConnection>> HolderChannel::Hello() {
  RETURN_IF_ERROR(SendHolderMessage(fd_, {{"op", "hello"}, {"pid", ::getpid()}}));
  ASSIGN_OR_RETURN(HolderMessage m, ReceiveHolderMessage(fd_));
  auto close_fds = [&m] {
    for (int fd : m.fds) ::close(fd);
  };
  if (m.body["op"] != "resume") {
    close_fds();
    return Corruption("holder channel: expected resume, got " + m.body["op"].dump());
  }
  const nlohmann::json& state = m.body["state"];
  if (state.is_null()) {
    close_fds();
    return std::optional<HeldConnection>();
  }
  Result<FuseConnectionState> st =
      state.is_string() ? FuseConnectionStateFromJson(state.get<std::string>())
                        : Result<FuseConnectionState>(InvalidArgument("state is not a string"));
  if (!st.ok() || st->device_fds != m.fds.size()) {
    close_fds();
    return st.ok() ? Corruption("holder channel: " + std::to_string(m.fds.size()) +
                                " fds for a connection of " + std::to_string(st->device_fds))
                   : st.status();
  }
  return std::optional<HeldConnection>(HeldConnection{.state = *st, .fds = std::move(m.fds)});
}

Status HolderChannel::SendSession(const FuseConnectionState& state, const std::vector<int>& fds) {
  return SendHolderMessage(fd_, {{"op", "session"}, {"state", FuseConnectionStateToJson(state)}},
                           fds);
}

Status HolderChannel::SendReady() { return SendHolderMessage(fd_, {{"op", "ready"}}); }

Status HolderChannel::SendFailed(const Status& why) {
  return SendHolderMessage(
      fd_, {{"op", "failed"}, {"code", static_cast<int>(why.code())}, {"message", why.message()}});
}

std::string HolderSocketPath(const std::string& run_dir, const std::string& mountpoint) {
  return RunFilePath(run_dir, mountpoint, "holder");
}

Result<nlohmann::json> AskMountHolder(const std::string& run_dir, const std::string& mountpoint,
                                      const nlohmann::json& request, std::chrono::seconds timeout) {
  const std::string path = HolderSocketPath(run_dir, mountpoint);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return InvalidArgument("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return Unavailable("no mount holder answers for " + mountpoint + " (" + std::strerror(err) +
                       "; was it mounted with --no-restart, or is it not mounted?)");
  }
  const std::string line = request.dump() + "\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("mount holder: send", err);
  }
  std::string reply;
  const auto deadline = Clock::Real()->Now() + timeout;
  char buf[4096];
  while (reply.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::Real()->Now());
    if (left.count() <= 0) {
      ::close(fd);
      return Unavailable("the mount holder did not answer within " +
                         std::to_string(timeout.count()) + " s");
    }
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  nlohmann::json j = nlohmann::json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
  if (!j.is_object()) return IoError("the mount holder closed the connection without a reply");
  return j;
}

}  // namespace granary
