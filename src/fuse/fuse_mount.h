// Mounting and unmounting a FUSE filesystem without libfuse.
//
// As root: open /dev/fuse and mount(2) it with type "fuse.granary" and
// "fd=N,rootmode=40000,user_id=U,group_id=G,default_permissions[,allow_other]",
// read-only. Otherwise (or when forced): run fusermount3 (or fuse 2's
// fusermount, same protocol) with _FUSE_COMMFD set to one end of a socketpair
// and receive the /dev/fuse fd over it (SCM_RIGHTS).
//
// Thread safety: free functions; no shared state.
#pragma once

#include <sys/types.h>

#include <string>

#include "fuse/fuse_server.h"
#include "granary/status.h"

namespace granary {

// OK when `path` is an existing directory that is not itself a mount point
// (and is empty unless `allow_non_empty`). Errors say which: NotFound
// "mount point /x does not exist", InvalidArgument "... is already a mount
// point (umount it first)", "... is not empty", "... is a dead FUSE mount
// (run granary umount)".
Status CheckMountpoint(const std::string& path, bool allow_non_empty);

// Mounts and returns the /dev/fuse fd (close-on-exec). The kernel has queued
// INIT on it when this returns.
Result<int> MountFuse(const FuseOptions& options, uint32_t uid, uint32_t gid);

// Aborts the FUSE connection `dev` (st_dev of the mount root) through fusectl
// (/sys/fs/fuse/connections/<minor>/abort), mounting fusectl there when it
// is not (root only). Every pending and later request fails; reads of the
// /dev/fuse fds return ENODEV.
Status AbortFuseConnection(dev_t dev);

// Sets the readahead of the mount's bdi (/sys/class/bdi/<maj>:<min>/read_ahead_kb).
Status SetFuseReadahead(dev_t dev, uint32_t kb);

// True when the effective capability set holds CAP_SYS_ADMIN.
bool HaveCapSysAdmin();

}  // namespace granary
