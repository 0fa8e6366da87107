// DirFs: a FuseFilesystem serving a local directory tree read-only. For
// tests and for the native-vs-FUSE benchmark; small on purpose.
//
// Regular files and directories are shown (symlinks are followed; other
// types are hidden). Node ids are assigned on first sight of a path and kept
// for the life of the DirFs (the tree is assumed not to change while
// mounted). Directory listings are read once, sorted by name, and cached.
// Open() offers the real file for passthrough (unless disabled); reads use
// pread on a descriptor opened by Open(), or open/pread/close when no handle
// exists (no-open mode, fh = 0).
//
// Thread safety: all methods are thread-safe; mu_ guards the node and
// listing tables (readers share it).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "fuse/fuse_filesystem.h"

namespace granary {

struct DirFsOptions {
  std::string root;           // directory to serve; required
  bool offer_backing = true;  // Open() returns the real file for passthrough
};

class DirFs : public FuseFilesystem {
 public:
  explicit DirFs(DirFsOptions options);

  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) override;
  Result<NodeAttr> GetAttr(uint64_t ino) override;
  Result<OpenResult> Open(uint64_t ino, int flags) override;
  Result<size_t> Read(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out) override;
  void Release(uint64_t ino, uint64_t fh) override;
  Status ReadDir(uint64_t ino, uint64_t offset, const DirEntrySink& emit) override;
  Result<StatFsResult> StatFs() override;

 private:
  // The absolute path of `ino`, or NotFound.
  Result<std::string> PathOf(uint64_t ino) const;
  // Stats `path` (relative to the root) and returns its attributes with an id.
  Result<NodeAttr> StatPath(const std::string& rel);
  uint64_t IdFor(const std::string& rel);
  Result<std::shared_ptr<const std::vector<DirEntry>>> Listing(uint64_t ino);

  const DirFsOptions options_;
  mutable SharedMutex mu_;                                         // guards ids_, paths_, listings_
  std::unordered_map<std::string, uint64_t> ids_ GUARDED_BY(mu_);  // relative path -> id
  std::vector<std::string> paths_ GUARDED_BY(mu_);  // id - 1 -> relative path ("" = root)
  std::unordered_map<uint64_t, std::shared_ptr<const std::vector<DirEntry>>> listings_
      GUARDED_BY(mu_);
};

}  // namespace granary
