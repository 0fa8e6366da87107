// Permission bits of what Granary creates in a cache.
//
// A cache holds copies of private datasets, so its directories and files are
// the daemon user's alone: who may read the data is decided by the mount
// (allow_other, default_permissions), never by the cache's own modes. The
// modes are passed explicitly at creation (the umask can only remove bits)
// and restored at open on caches written with wider ones.
//
// Thread safety: constants only.
#pragma once

#include <sys/types.h>

namespace granary {

// Cache directories: tier dirs and their fan-out dirs, the dataset dir, the
// index dir, the memory tier's /dev/shm/granary-<id>.
inline constexpr mode_t kCacheDirMode = 0700;

// Cache files: blocks, the snapshot, the index journal and checkpoint, LOCK.
inline constexpr mode_t kCacheFileMode = 0600;

}  // namespace granary
