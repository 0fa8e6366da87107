// Helpers the FuseDispatcher's translation units share (fuse_dispatch.cc,
// fuse_dispatch_write.cc): reply constructors and request-argument access.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "fuse/fuse_dispatch.h"

namespace granary::fuse_dispatch_util {

// The protocol layer's tag on file handles of passthrough opens.
inline constexpr uint64_t kPassthroughFh = 1ULL << 63;

// The request's fixed argument struct, or null when the body is too short.
template <typename T>
const T* Arg(std::span<const char> body) {
  return body.size() >= sizeof(T) ? reinterpret_cast<const T*>(body.data()) : nullptr;
}

inline HandlerReply Error(int err) { return {.error = err, .size = 0, .send = true}; }
inline HandlerReply Ok(size_t size) { return {.error = 0, .size = size, .send = true}; }
inline HandlerReply NoReply() { return {.error = 0, .size = 0, .send = false}; }

// The NUL-terminated name at the start of `body` (after `skip` bytes).
inline std::string_view NameArg(std::span<const char> body, size_t skip = 0) {
  if (body.size() <= skip) return {};
  const char* p = body.data() + skip;
  size_t max = body.size() - skip;
  return std::string_view(p, strnlen(p, max));
}

}  // namespace granary::fuse_dispatch_util
