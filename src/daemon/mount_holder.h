// MountHolder: the small long-lived process `granary mount` leaves behind, so
// that the mount outlives its daemon (docs/reliability.md, "Daemon restarts
// and upgrades").
//
// It runs the daemon as a child (the same command line, exec'd from
// `binary`, with kHolderFdEnv naming its end of the channel,
// holder_channel.h). The first daemon mounts, negotiates INIT and hands the
// holder a duplicate of every /dev/fuse fd with the INIT outcome; from then
// on the connection lives as long as the holder does, whatever happens to
// daemons:
//   - a daemon that dies any other way than a clean stop (kill -9, abort,
//     OOM) is started again at once; the new one takes the held fds, serves
//     without a second INIT and asks the kernel to resend what the dead one
//     had read (FuseServer::Resume). Readers see a pause, not an error.
//   - an upgrade (control socket request, `granary mount --upgrade`) sends
//     the daemon SIGUSR2: it stops reading, answers what it holds and exits
//     with kExitHandedOver; the holder starts the new binary the same way.
//   - a daemon that exits 0 stopped cleanly (SIGTERM, `granary umount`, an
//     external unmount): the holder cleans up and exits 0.
//   - kMaxFailures daemons in a row that die before serving (a crash loop):
//     the holder gives up: aborts the connection (readers get ECONNABORTED,
//     nothing hangs), lazily unmounts, exits 1.
//   - SIGTERM/SIGINT to the holder: forwarded to the daemon, which
//     unmounts; after stop_timeout it is killed and the holder unmounts.
//     SIGUSR1 (stats file) and SIGHUP (peer list file) are forwarded.
// The holder writes the mount's pid file with its own pid (so `granary
// umount` stops it) and removes it, its control socket and the backing-id
// journal when it exits.
//
// Thread safety: RunMountHolder runs a single-threaded poll loop and owns
// the process's signal dispositions while it runs.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "granary/status.h"

namespace granary {

// Exit status of a daemon that handed its connection over on SIGUSR2.
inline constexpr int kExitHandedOver = 75;

struct MountHolderOptions {
  std::string binary;             // program the daemon is exec'd from (absolute)
  std::vector<std::string> argv;  // its argument vector, argv[0] included
  std::string mountpoint;         // canonical
  std::string source;             // for the pid file
  std::string run_dir;
  int ready_fd = -1;  // background mount: gets "ready" or "<code> <message>" once; closed
  // Daemons in a row that die before serving before the holder gives up.
  int max_failures = 5;
  // How long a stopping daemon may take before it is killed.
  std::chrono::seconds stop_timeout{60};
};

// Runs the holder until the mount ends. OK after a clean stop; the first
// daemon's start-up error (also sent to ready_fd) when the mount never came
// up; Internal when the holder gave the mount up.
Status RunMountHolder(const MountHolderOptions& options);

}  // namespace granary
