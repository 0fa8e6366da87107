// FuseFilesystem: the small interface between the FUSE kernel-protocol layer
// (FuseServer) and whatever serves the files (the cache engine adapter, or
// testing/dir_fs.h's DirFs in tests and benchmarks). Adapters translate; the protocol layer owns
// framing, INIT, passthrough backing ids, attribute normalisation (files 0444
// and dirs 0555, or 0644 and 0755 on a writable mount; uid/gid from
// FuseOptions), timeouts and the Status -> errno map.
//
// Node ids: 1 (kRootIno) is the root directory. Every other id is chosen by
// the adapter and must stay valid until Forget(ino) is called for it. The
// protocol layer counts the kernel's lookup references itself (from LOOKUP
// and READDIRPLUS replies, minus FORGETs) and calls Forget() once, when the
// count drops to zero; the root is never forgotten.
// The tree the origin gave is immutable while mounted (the kernel caches its
// entries and attributes for the configured timeouts); a writable mount adds,
// changes and removes files only through the write operations below.
//
// Errors: return a Status; FuseErrno() maps it (NotFound -> ENOENT, ...).
//
// Thread safety: every method is called concurrently from the transport
// threads (one per CPU by default) and the read waiters; implementations
// must be thread-safe and must not block for long except in Open() / Read()
// / ReadCancellable() on a cold object. A READ is first offered to TryRead()
// on a transport thread; only when that answers "would wait" does it go to a
// read waiter thread (ReadCancellable), so a stalled origin never holds the
// threads that serve lookups and cached files.
#pragma once

#include <cerrno>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/cancel.h"
#include "granary/status.h"

namespace granary {

inline constexpr uint64_t kRootIno = 1;

// What a node looks like. Mode bits and owners are set by the protocol layer.
struct NodeAttr {
  uint64_t ino = 0;      // the node id (never 0)
  uint64_t size = 0;     // bytes; directories: anything (e.g. 4096)
  int64_t mtime_ns = 0;  // modification time, ns since the epoch (also atime/ctime)
  bool is_dir = false;   // directory (0555) or regular file (0444)
  uint32_t nlink = 1;    // link count shown by stat (dirs: 2 is customary)
};

// One child in a directory listing.
struct DirEntry {
  std::string name;  // no '/', not "." or ".."
  NodeAttr attr;     // the child's attributes (READDIRPLUS hands them to the kernel)
};

// How the adapter wants a file served after OPEN.
struct OpenResult {
  // Opaque handle passed back to Read() and Release(); must be < 2^63 (the
  // protocol layer uses the top bit for its own bookkeeping).
  uint64_t fh = 0;
  // A complete local file holding exactly this object's bytes, for kernel
  // passthrough. Empty: serve reads through Read(). The layer opens it, turns
  // it into a backing id (kept per node until Forget() or DropBacking()) and
  // closes the fd at once: no descriptor is held per cached object.
  // OpenBackingFile() opens it when the inode has no backing id yet.
  std::string backing_path;
  // Keep the kernel page cache across opens (userspace reads). True is right
  // for an immutable snapshot.
  bool keep_cache = true;
};

// Filesystem-wide numbers for statfs(2). Zeros are fine.
struct StatFsResult {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t total_files = 0;
  uint64_t free_files = 0;
};

// Called for each directory entry; return false to stop (reply buffer full).
using DirEntrySink = std::function<bool(const DirEntry& entry)>;

class FuseFilesystem {
 public:
  virtual ~FuseFilesystem() = default;

  // The child `name` of directory `parent`. NotFound when absent.
  virtual Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) = 0;

  // Attributes of a node the kernel holds a reference to.
  virtual Result<NodeAttr> GetAttr(uint64_t ino) = 0;

  // The kernel holds no more references to `ino`: its id may be recycled.
  virtual void Forget(uint64_t ino) {}

  // Opens a regular file for reading (`flags`: the open(2) flags). Not called
  // at all in `cached` read mode (no-open: the kernel stops sending OPEN).
  virtual Result<OpenResult> Open(uint64_t ino, int flags) = 0;

  // Reads up to out.size() bytes at `offset`; returns the count, short only
  // at end of file (0 past it). `fh` is 0 in `cached` mode (no OPEN sent).
  virtual Result<size_t> Read(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out) = 0;

  // Read() if it needs no wait (the bytes are local, or past the end);
  // nullopt, without reading, when Read() would wait (for the origin). The
  // default always reads.
  virtual std::optional<Result<size_t>> TryRead(uint64_t ino, uint64_t fh, uint64_t offset,
                                                std::span<char> out) {
    return Read(ino, fh, offset, out);
  }

  // Read() whose waiting ends with Cancelled when `cancel` is cancelled
  // (FUSE_INTERRUPT of this request, unmount). The default ignores `cancel`.
  virtual Result<size_t> ReadCancellable(uint64_t ino, uint64_t fh, uint64_t offset,
                                         std::span<char> out, CancelToken& cancel) {
    return Read(ino, fh, offset, out);
  }

  // Files read from the cache (the layer's CloseWatcher, in cached mode):
  // TrackMisses() starts a record of the files read from beyond the cache,
  // forgetting an earlier one (a counting window starts); TakeMiss(ino) then
  // answers whether a read of `ino` since it was last asked needed bytes
  // from beyond the cache, and forgets it. The defaults keep no record.
  virtual void TrackMisses() {}
  virtual bool TakeMiss(uint64_t ino) { return false; }

  // Opens (O_RDONLY) the backing file that Open() named in `backing_path`,
  // when the layer turns it into a backing id. An adapter whose files can be
  // replaced between Open() and this call checks here that the file it opens
  // is still the complete one (the cache store reuses paths). Returns an fd
  // the layer closes once the backing id holds the file. The default opens
  // the path.
  virtual Result<int> OpenBackingFile(uint64_t ino, const std::string& backing_path);

  // The last close of a handle returned by Open().
  virtual void Release(uint64_t ino, uint64_t fh) {}

  // Lists directory `ino` from position `offset` (0 = first child; entry i of
  // the listing is at position i), calling `emit` in a stable order until it
  // returns false or the listing ends. Emitted ids must stay valid like
  // those from Lookup() (READDIRPLUS hands them to the kernel).
  virtual Status ReadDir(uint64_t ino, uint64_t offset, const DirEntrySink& emit) = 0;

  virtual Result<StatFsResult> StatFs() { return StatFsResult{}; }

  // ---- Writes (FuseOptions::writable; docs/semantics.md). ----
  // These answer an errno directly (0 = done): the refusals a writer must
  // tell apart (EPERM, EEXIST, ENOTEMPTY, EXDEV, ENOSPC) have no Status code.
  // The defaults refuse every write (an adapter without writes serves a
  // read-only tree).

  // Opens a file for writing (`flags` has O_WRONLY or O_RDWR; O_TRUNC).
  // `pid`: the caller's (the request header's), for Flush to tell the
  // opener's close from a forked child's.
  virtual int OpenForWrite(uint64_t ino, int flags, uint32_t pid, OpenResult* out) { return EROFS; }
  // Creates and opens a new file in `parent`.
  virtual int Create(uint64_t parent, std::string_view name, int flags, uint32_t pid,
                     NodeAttr* attr, OpenResult* out) {
    return EROFS;
  }
  virtual int Mkdir(uint64_t parent, std::string_view name, NodeAttr* attr) { return EROFS; }
  // Writes data at `offset`; *written = bytes written.
  virtual int Write(uint64_t ino, uint64_t fh, uint64_t offset, std::span<const char> data,
                    size_t* written) {
    return EROFS;
  }
  // close(2) of a descriptor (FLUSH, by process `pid`) and fsync(2): make
  // the file durable at the origin.
  virtual int Flush(uint64_t ino, uint64_t fh, uint32_t pid) { return 0; }
  virtual int Fsync(uint64_t ino, uint64_t fh) { return 0; }
  // truncate(2) when `size` is set; times are accepted (and not kept), mode
  // and owner changes refused. *attr = the attributes after.
  virtual int SetAttr(uint64_t ino, std::optional<uint64_t> size, bool mode_or_owner,
                      NodeAttr* attr) {
    return EROFS;
  }
  virtual int Unlink(uint64_t parent, std::string_view name) { return EROFS; }
  virtual int Rmdir(uint64_t parent, std::string_view name) { return EROFS; }
  virtual int Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                     std::string_view new_name) {
    return EROFS;
  }
};

}  // namespace granary
