// The framing of the daemon's socket (docs/api.md): newline-terminated JSON
// requests and replies over a Unix stream socket; an "open" reply carries the
// cache file's descriptor as SCM_RIGHTS ancillary data on its first byte; a
// "read" reply line is followed by exactly "n" raw bytes.
//
// Thread safety: a WireConn is used by one thread at a time.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "granary/status.h"

namespace granary {

inline constexpr int kApiProtocolVersion = 1;

class WireConn {
 public:
  explicit WireConn(int fd) : fd_(fd) {}
  ~WireConn();  // closes the socket and any descriptor received and not taken
  WireConn(const WireConn&) = delete;
  WireConn& operator=(const WireConn&) = delete;

  int fd() const { return fd_; }
  // Writes `j` + '\n' (and `pass_fd` as SCM_RIGHTS when >= 0), then `payload`.
  Status Send(const nlohmann::json& j, int pass_fd = -1, std::span<const char> payload = {});
  // The next line (without '\n'); IoError at EOF. A line longer than
  // `max_bytes` is InvalidArgument (the connection is then unusable).
  Result<std::string> ReadLine(size_t max_bytes);
  // Exactly out.size() raw bytes.
  Status ReadExact(std::span<char> out);
  // The oldest descriptor received and not taken yet, or -1. The caller owns it.
  int TakeFd();
  // Waits up to `timeout_ms` for bytes and receives what came: true when
  // some did, IoError when the other side closed the connection.
  Result<bool> Poll(int timeout_ms);
  // Received bytes not read yet; DropUnread discards them.
  std::string_view Unread() const { return std::string_view(buf_).substr(start_); }
  void DropUnread() { start_ = buf_.size(); }

 private:
  Status Fill();  // one recvmsg into buf_ (collecting descriptors)

  int fd_;
  std::string buf_;
  size_t start_ = 0;  // first unread byte of buf_
  std::vector<int> fds_;
};

// Status <-> the "code"/"error" fields of a reply.
nlohmann::json ErrorJson(const Status& s);
Status StatusFromReply(const nlohmann::json& reply);

}  // namespace granary
