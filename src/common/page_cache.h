// How much of a file the page cache holds, from cachestat(2) (Linux 6.5; not
// in Debian 12's headers). Used by the store's cold reads and by tests that
// check what stays in memory.
//
// Thread safety: a plain system call.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace granary {

// Pages of [offset, offset + len) of `fd` in the page cache (len 0: to the
// end of the file). No I/O, unlike a RWF_NOWAIT read, which starts readahead;
// needs no mapping, so it works on any descriptor. -1 (errno set) where the
// kernel lacks it.
inline int64_t CachedPages(int fd, uint64_t offset, uint64_t len) {
#ifdef __NR_cachestat
  constexpr long kCachestat = __NR_cachestat;
#else
  constexpr long kCachestat = 451;  // same number on every architecture
#endif
  struct {
    uint64_t off, len;
  } range{offset, len};
  struct {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } cs{};
  if (::syscall(kCachestat, fd, &range, &cs, 0) != 0) return -1;
  return static_cast<int64_t>(cs.nr_cache);
}

}  // namespace granary
