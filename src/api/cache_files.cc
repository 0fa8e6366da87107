// CachedFile, FdCache, FdBound and PreadAll (see cache_files.h).
#include "api/cache_files.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace granary {

CachedFile::~CachedFile() {
  if (fd >= 0) ::close(fd);
}

FdCache::FdCache(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

FilePtr FdCache::Get(const std::string& path) {
  MutexLock lock(mu_);
  auto it = map_.find(path);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return it->second.first;
}

void FdCache::Put(const std::string& path, FilePtr f) {
  FilePtr evicted;  // closed after the lock is released
  MutexLock lock(mu_);
  auto it = map_.find(path);
  if (it != map_.end()) {
    evicted = std::exchange(it->second.first, std::move(f));
    lru_.splice(lru_.begin(), lru_, it->second.second);
    lock.Unlock();
    return;
  }
  lru_.push_front(path);
  map_.emplace(path, std::make_pair(std::move(f), lru_.begin()));
  if (map_.size() > capacity_) {
    auto last = map_.find(lru_.back());
    evicted = std::move(last->second.first);
    map_.erase(last);
    lru_.pop_back();
  }
  lock.Unlock();
}

void FdCache::Clear() {
  Map dropped;  // its files are closed after the lock is released
  MutexLock lock(mu_);
  dropped.swap(map_);
  lru_.clear();
  lock.Unlock();
}

size_t FdBound(size_t wanted) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return std::min<size_t>(wanted, 512);
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const size_t half = rl.rlim_cur == RLIM_INFINITY ? wanted : static_cast<size_t>(rl.rlim_cur / 2);
  return std::max<size_t>(16, std::min(wanted, half));
}

Result<size_t> PreadAll(int fd, uint64_t size, uint64_t offset, std::span<char> out,
                        const std::string& path) {
  if (offset >= size || out.empty()) return size_t{0};
  size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), size - offset));
  size_t done = 0;
  while (done < want) {
    ssize_t n = ::pread(fd, out.data() + done, want - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(path + ": read of the cache file: " + strerror(errno));
    }
    if (n == 0) return Corruption(path + ": cache file shorter than the object");
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace granary
