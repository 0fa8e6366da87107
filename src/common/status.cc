#include "granary/status.h"

#include <cerrno>
#include <cstring>

namespace granary {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotFound: return "not found";
    case Code::kPermissionDenied: return "permission denied";
    case Code::kUnavailable: return "unavailable";
    case Code::kIoError: return "I/O error";
    case Code::kCorruption: return "corruption";
    case Code::kNoSpace: return "no space";
    case Code::kUnimplemented: return "not supported";
    case Code::kCancelled: return "cancelled";
    case Code::kInternal: return "internal error";
    case Code::kStale: return "changed at the origin";
  }
  return "unknown";
}

namespace {

// `s` with its control characters escaped, so a message stays one line.
std::string OneLine(std::string s) {
  size_t i = 0;
  while (i < s.size() && !IsControlChar(s[i])) ++i;
  if (i == s.size()) return s;
  std::string out = s.substr(0, i);
  static constexpr char kHex[] = "0123456789abcdef";
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (!IsControlChar(c)) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      const auto u = static_cast<unsigned char>(c);
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    }
  }
  return out;
}

}  // namespace

Status::Status(Code code, std::string message)
    : code_(code), message_(OneLine(std::move(message))) {}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

Status ErrnoStatus(std::string_view what, int err) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR: return NotFound(std::move(msg));
    case EACCES:
    case EPERM: return PermissionDenied(std::move(msg));
    case ENOSPC:
    case EDQUOT: return NoSpace(std::move(msg));
    case EINVAL: return InvalidArgument(std::move(msg));
    case EAGAIN:
    case ETIMEDOUT:
    case ECONNREFUSED:
    case ECONNRESET: return Unavailable(std::move(msg));
    default: return IoError(std::move(msg));
  }
}

}  // namespace granary
