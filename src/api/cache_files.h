// The cache-file descriptors a native client (src/api/client.cc) holds: an
// open cache file, the bounded least-recently-used set of them by path, and
// reading one.
//
// Thread safety: FdCache may be used from many threads at once; CachedFile is
// immutable once made (its descriptor is closed when the last holder drops it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "granary/status.h"

namespace granary {

// An open cache file (or, fd -1, a file read through the engine/daemon).
struct CachedFile {
  int fd = -1;
  uint64_t size = 0;
  ~CachedFile();
};
using FilePtr = std::shared_ptr<CachedFile>;

// Descriptors by path, least recently used closed first (outside the lock).
class FdCache {
 public:
  explicit FdCache(size_t capacity);
  FilePtr Get(const std::string& path) EXCLUDES(mu_);
  void Put(const std::string& path, FilePtr f) EXCLUDES(mu_);
  void Clear() EXCLUDES(mu_);

 private:
  size_t capacity_;
  Mutex mu_;  // guards map_, lru_; a leaf lock
  std::list<std::string> lru_ GUARDED_BY(mu_);
  using Map = std::unordered_map<std::string, std::pair<FilePtr, std::list<std::string>::iterator>>;
  Map map_ GUARDED_BY(mu_);
};

// How many cache-file descriptors a client may keep: `wanted`, at most half
// of the file limit, whose soft value is raised to the hard one first.
size_t FdBound(size_t wanted);

// Up to out.size() bytes of a cache file of `size` bytes at `offset` (fewer
// only at its end). Corruption when the file is shorter than `size`; `path`
// names the file in errors.
Result<size_t> PreadAll(int fd, uint64_t size, uint64_t offset, std::span<char> out,
                        const std::string& path);

}  // namespace granary
