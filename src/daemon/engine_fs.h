// EngineFs: the FuseFilesystem adapter over one CacheEngine and its Snapshot.
// It only translates: node ids are snapshot inodes (root = 1 = kRootIno), so
// there is no node table and Forget() is a no-op; attributes come from the
// snapshot (files: size, mtime; directories: the snapshot's creation time);
// reads go to CacheEngine::Read. Open() offers the complete cache file for
// passthrough when the engine has it (verifying it after a restart through
// OpenCachedFile), else userspace reads.
//
// Thread safety: every method may be called from any number of FUSE threads
// at once; the engine and the snapshot are thread-safe, counters are atomics.
#pragma once

#include <atomic>
#include <cstdint>

#include "cache/engine.h"
#include "fuse/fuse_filesystem.h"

namespace granary {

struct EngineFsOptions {
  // Offer cache files for kernel passthrough from Open().
  bool offer_backing = true;
  // Entries per snapshot ReadDir call while filling one READDIR reply.
  size_t readdir_page = 256;
};

// Counters of the adapter (monotonic).
struct EngineFsStats {
  uint64_t opens = 0;           // Open calls
  uint64_t backing_offers = 0;  // Open replies naming a cache file (passthrough)
  uint64_t read_errors = 0;     // Read calls that failed
};

class EngineFs : public FuseFilesystem {
 public:
  // Borrows `engine` (must outlive this object).
  EngineFs(CacheEngine* engine, EngineFsOptions options = {});

  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) override;
  Result<NodeAttr> GetAttr(uint64_t ino) override;
  Result<OpenResult> Open(uint64_t ino, int flags) override;
  Result<size_t> Read(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out) override;
  Status ReadDir(uint64_t ino, uint64_t offset, const DirEntrySink& emit) override;
  Result<StatFsResult> StatFs() override;

  EngineFsStats stats() const;

 private:
  NodeAttr AttrOf(const EntryView& e) const;

  CacheEngine* engine_;
  const Snapshot& snapshot_;
  EngineFsOptions options_;
  std::atomic<uint64_t> opens_{0}, backing_offers_{0}, read_errors_{0};
};

}  // namespace granary
