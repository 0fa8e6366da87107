// The channel between a mount holder (mount_holder.h) and the daemon it
// runs, and the holder's control socket.
//
// Channel: a SOCK_SEQPACKET socketpair; the daemon finds its end in the
// environment variable kHolderFdEnv. Every message is one JSON object (at
// most kHolderMessageMax bytes) with "op", some carrying /dev/fuse fds
// (SCM_RIGHTS):
//   daemon -> holder  {"op":"hello"}                 first message
//   holder -> daemon  {"op":"resume","state":S|null} + the connection's fds
//                     when the holder keeps one (S: FuseConnectionState JSON)
//   daemon -> holder  {"op":"session","state":S}    + fds: a fresh mount
//   daemon -> holder  {"op":"ready"}                 the mount serves
//   daemon -> holder  {"op":"failed","code":C,"message":M}  start-up failed
// Control socket (<run dir>/mount-<hash>.holder, SOCK_STREAM, mode 0600):
// one JSON request line, one JSON reply line (see AskMountHolder).
//
// Thread safety: a HolderChannel is used by the daemon's controlling thread.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fuse/fuse_connection_state.h"
#include "granary/status.h"

namespace granary {

inline constexpr const char* kHolderFdEnv = "GRANARY_HOLDER_FD";
inline constexpr size_t kHolderMessageMax = 64 << 10;
// The most /dev/fuse fds one message carries (the kernel's SCM_MAX_FD is 253).
inline constexpr size_t kHolderMaxFds = 64;
static_assert(kHolderMaxFds >= static_cast<size_t>(kFuseMaxDeviceFds));

// One message: JSON text and the fds that came with it (owned by the receiver).
struct HolderMessage {
  nlohmann::json body;
  std::vector<int> fds;
};

// Sends `body` with `fds` (borrowed: the receiver gets its own copies).
Status SendHolderMessage(int sock, const nlohmann::json& body, const std::vector<int>& fds = {});
// Receives one message (blocking). NotFound at end of stream; fds arrive close-on-exec.
Result<HolderMessage> ReceiveHolderMessage(int sock);

// What a daemon takes over: the connection's state and its fds (owned).
struct HeldConnection {
  FuseConnectionState state;
  std::vector<int> fds;
};

// The daemon's end of the channel.
class HolderChannel {
 public:
  // The channel named by kHolderFdEnv (the variable is removed so children
  // do not inherit it); nullptr when the daemon runs without a holder.
  static Result<std::shared_ptr<HolderChannel>> FromEnvironment();
  explicit HolderChannel(int fd) : fd_(fd) {}
  ~HolderChannel();
  HolderChannel(const HolderChannel&) = delete;
  HolderChannel& operator=(const HolderChannel&) = delete;

  // Says hello; returns the connection the holder keeps (a restart or an
  // upgrade), or nullopt for a fresh mount.
  Result<std::optional<HeldConnection>> Hello();
  // Hands the holder a fresh mount's connection (fds borrowed).
  Status SendSession(const FuseConnectionState& state, const std::vector<int>& fds);
  Status SendReady();
  Status SendFailed(const Status& why);

 private:
  int fd_;
};

// The holder's control socket of `mountpoint`.
std::string HolderSocketPath(const std::string& run_dir, const std::string& mountpoint);

// Sends `request` to the holder of `mountpoint` and returns its reply.
// Requests: {"op":"status"} -> {"ok":true,"holder_pid","daemon_pid","binary",
// "restarts","last_takeover_ms"}; {"op":"upgrade","binary":PATH} -> once the
// new daemon serves {"ok":true,"daemon_pid","binary","takeover_ms"}, or
// {"ok":false,"error":...} (the previous binary serves again). Unavailable
// when no holder answers (the mount was made with --no-restart, or none).
Result<nlohmann::json> AskMountHolder(const std::string& run_dir, const std::string& mountpoint,
                                      const nlohmann::json& request, std::chrono::seconds timeout);

}  // namespace granary
