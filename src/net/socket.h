// TCP socket helpers for the peer protocol: address parsing, listening,
// connecting with a deadline, and deadline-bounded send / sendfile / recv on
// non-blocking sockets.
//
// Every socket these functions create is non-blocking and close-on-exec, with
// TCP_NODELAY set (frames are small and latency matters). Waiting happens in
// poll() up to a deadline; a deadline of Deadline::max() waits forever (until
// the socket is shut down). Errors are plain messages ("connection refused",
// "timed out"); callers add which peer they were talking to.
//
// Thread safety: all functions are thread-safe; concurrent sends on one
// socket must be serialized by the caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "granary/status.h"

namespace granary::net {

using Deadline = Clock::TimePoint;

// Now on the process's real clock (the one poll() waits on).
inline Deadline Now() { return Clock::Real()->Now(); }
inline Deadline After(std::chrono::milliseconds d) { return Now() + d; }

// "HOST:PORT" (or "[v6]:PORT") split into host and port text. An empty host
// means every interface. InvalidArgument names `what` and the address.
struct HostPort {
  std::string host;
  std::string port;
};
Result<HostPort> SplitHostPort(std::string_view address, std::string_view what);

// A listening socket bound to `address` (port 0 picks one); `bound` gets the
// bound "host:port".
Result<int> ListenTcp(const std::string& address, int backlog, std::string* bound);

// Accepts one pending connection (non-blocking); -1 when none is pending.
int AcceptTcp(int listen_fd, std::string* peer);

// Connects to `address` before `deadline`. Unavailable on refusal, timeout,
// unreachable hosts; InvalidArgument for a malformed address.
Result<int> ConnectTcp(const std::string& address, Deadline deadline);

// Sends every byte of `parts`, in order, before `deadline`. `more` sets
// MSG_MORE (more data follows at once, e.g. a sendfile).
Status SendAll(int fd, const std::vector<std::string_view>& parts, Deadline deadline,
               bool more = false);

// Sends `length` bytes of `file` from `offset` with sendfile(2) before `deadline`.
Status SendFileRange(int sock, int file, uint64_t offset, uint64_t length, Deadline deadline);

// Reads what is available (at most n bytes), waiting until `deadline` for
// some. 0 = the peer closed the connection. Unavailable("timed out") past the deadline.
Result<size_t> RecvSome(int fd, char* buf, size_t n, Deadline deadline);

// Shuts both directions down, waking any thread blocked on fd; fd stays open.
void ShutdownSocket(int fd);

}  // namespace granary::net
