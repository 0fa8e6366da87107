// FuseConnectionState: what a daemon taking over a live FUSE connection
// needs to know of it, since the kernel negotiates INIT once per connection:
// the INIT outcome, the read mode the kernel has been told about (cached mode
// answered OPEN with ENOSYS, which the kernel remembers), the device number of
// the mount and how many /dev/fuse fds travel with it.
//
// The JSON form travels between a daemon and the process that keeps the
// connection across daemon restarts (daemon/mount_holder.h): an object with
// "version": 1 and the fields below. FuseConnectionStateFromJson checks every
// field, so a daemon never serves a connection it misunderstood.
//
// Thread safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "fuse/fuse_server.h"
#include "granary/status.h"

namespace granary {

struct FuseConnectionState {
  FuseSessionInfo session;  // INIT's outcome (threads: as the first daemon ran)
  FuseReadMode read_mode = FuseReadMode::kPassthrough;
  uint64_t dev = 0;         // st_dev of the mount root
  uint32_t device_fds = 0;  // /dev/fuse fds handed over: the original first, then clones
};

inline constexpr int kFuseConnectionStateVersion = 1;

std::string FuseConnectionStateToJson(const FuseConnectionState& state);

// InvalidArgument naming the field for a missing or malformed one, or an
// unknown version.
Result<FuseConnectionState> FuseConnectionStateFromJson(std::string_view text);

}  // namespace granary
