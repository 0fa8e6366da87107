// EngineFs: the FuseFilesystem adapter over one CacheEngine and its Snapshot
// versions. It only translates: attributes come from the snapshot (files:
// size, mtime; directories: the snapshot's creation time); reads go to
// CacheEngine::Read (TryRead() only when the store holds the range, so the
// FUSE layer hands reads that wait for the origin to its read waiters).
// Open() offers the complete cache file for passthrough
// when the engine has it (verifying it after a restart through
// CachedFilePath), else userspace reads; OpenBackingFile() then opens it
// through the store, which checks that the file it opened is still that
// complete file (a path can be reused by a later, partial admission).
//
// Node ids: the root is always 1 and shows the current version. Every other
// node is (version base + snapshot inode), where the first version's base is
// 0 (so node id = inode) and each later version (AddVersion, `granary sync`)
// starts after the previous one's last id: ids are never reused, a node the
// kernel learned before a sync keeps naming the same entry of the version it
// came from, and there is no node table (Forget() is a no-op). The newest
// kKeptVersions versions are kept; nodes of older ones answer Stale (ESTALE).
//
// Thread safety: every method may be called from any number of FUSE threads
// at once; versions_mu_ guards the version list (readers share it), the
// engine and the snapshots are thread-safe, counters are atomics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/engine.h"
#include "common/mutex.h"
#include "fuse/fuse_filesystem.h"
#include "meta/overlay.h"

namespace granary {

struct EngineFsOptions {
  // Writable mount (docs/semantics.md): the files and directories it creates
  // live in this overlay (borrowed; null = read-only).
  Overlay* overlay = nullptr;
  // With an overlay: writes to (and truncation of) files that came from the
  // origin are allowed (the object is replaced on close), and so is deleting them.
  bool allow_overwrite = false;
  bool allow_delete = false;
  // Offer cache files for kernel passthrough from Open().
  bool offer_backing = true;
  // Entries per snapshot ReadDir call while filling one READDIR reply.
  size_t readdir_page = 256;
  // Node numbering continued from a previous daemon of the same mount (a
  // mount holder restarted it): ids of the version served first are base +
  // inode, and ids up to stale_below (versions that daemon served before)
  // answer Stale. 0, 0: a fresh mount (node id = inode).
  uint64_t base = 0;
  uint64_t stale_below = 0;
};

// Where the node ids of the version a mount shows now come from
// (EngineFs::numbering()): what a successor daemon needs to keep them.
struct NodeNumbering {
  uint64_t version = 0;    // Snapshot::version() of the current version
  uint64_t base = 0;       // its node id = base + inode
  uint64_t next_base = 0;  // the base a next version (a sync) gets
};

// Counters of the adapter (monotonic).
struct EngineFsStats {
  uint64_t opens = 0;           // Open calls
  uint64_t backing_offers = 0;  // Open replies naming a cache file (passthrough)
  uint64_t read_errors = 0;     // Read calls that failed
  uint64_t stale_nodes = 0;     // requests for nodes of versions no longer kept
};

class EngineFs : public FuseFilesystem {
 public:
  // Versions kept at once (the current one included).
  static constexpr size_t kKeptVersions = 4;

  // Borrows `engine` (must outlive this object); serves its current snapshot.
  explicit EngineFs(CacheEngine* engine, EngineFsOptions options = {});

  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) override;
  Result<NodeAttr> GetAttr(uint64_t ino) override;
  Result<OpenResult> Open(uint64_t ino, int flags) override;
  Result<int> OpenBackingFile(uint64_t ino, const std::string& backing_path) override;
  Result<size_t> Read(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out) override;
  // Serves only what the local store holds (CacheEngine::ReadLocal).
  std::optional<Result<size_t>> TryRead(uint64_t ino, uint64_t fh, uint64_t offset,
                                        std::span<char> out) override;
  Result<size_t> ReadCancellable(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out,
                                 CancelToken& cancel) override;
  Status ReadDir(uint64_t ino, uint64_t offset, const DirEntrySink& emit) override;
  Result<StatFsResult> StatFs() override;
  void TrackMisses() override;
  bool TakeMiss(uint64_t ino) override;

  int OpenForWrite(uint64_t ino, int flags, uint32_t pid, OpenResult* out) override;
  int Create(uint64_t parent, std::string_view name, int flags, uint32_t pid, NodeAttr* attr,
             OpenResult* out) override;
  int Mkdir(uint64_t parent, std::string_view name, NodeAttr* attr) override;
  int Write(uint64_t ino, uint64_t fh, uint64_t offset, std::span<const char> data,
            size_t* written) override;
  int Flush(uint64_t ino, uint64_t fh, uint32_t pid) override;
  void Release(uint64_t ino, uint64_t fh) override;
  int Fsync(uint64_t ino, uint64_t fh) override;
  int SetAttr(uint64_t ino, std::optional<uint64_t> size, bool mode_or_owner,
              NodeAttr* attr) override;
  int Unlink(uint64_t parent, std::string_view name) override;
  int Rmdir(uint64_t parent, std::string_view name) override;
  int Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
             std::string_view new_name) override;

  // Makes `next` the version the root shows (after the engine switched to
  // it). Returns the names the kernel may hold under the root from the
  // previous version plus those of the new one: invalidating them (FUSE
  // NOTIFY_INVAL_ENTRY) makes the next lookups reach the new version.
  std::vector<std::string> AddVersion(std::shared_ptr<const Snapshot> next);

  // The node id of inode `ino` of `snap`, or 0 when `snap` is not a kept
  // version.
  uint64_t NodeOf(const Snapshot& snap, uint64_t ino) const;

  EngineFsStats stats() const;
  NodeNumbering numbering() const;

  // Records the node ids handed out for overlay entries (files and
  // directories a writable mount created) in the file `path`, one line per
  // id given ("<id>\t<path>") or dropped ("-\t<id>"), written before the
  // reply that names it. restore = true first reads it (a daemon taking over
  // from one that died or handed over): the kernel's ids of those entries
  // keep naming them, so a writer's descriptor survives the restart.
  // Call before requests flow.
  Status OpenOverlayNodeJournal(const std::string& path, bool restore);
  ~EngineFs() override;

 private:
  // Uploads the node's staged file if it changed (close, fsync, release).
  int CommitNode(uint64_t node);
  struct Version {
    uint64_t base = 0;  // node id = base + inode (inode >= 2; the root is always 1)
    std::shared_ptr<const Snapshot> snap;
  };
  // The version and inode a node id names. Stale for a dropped version,
  // NotFound for an id never handed out.
  struct Resolved {
    std::shared_ptr<const Snapshot> snap;
    uint64_t base = 0;
    uint64_t ino = 0;
  };
  Result<Resolved> Resolve(uint64_t node) const;
  NodeAttr AttrOf(const Snapshot& snap, uint64_t base, const EntryView& e) const;
  // Read() of the node `r` resolved to (or its error).
  Result<size_t> ReadResolved(const Result<Resolved>& r, uint64_t offset, std::span<char> out,
                              CancelToken* cancel);

  // ---- the overlay of a writable mount ----
  // Node ids of overlay entries: kOverlayBase + n (never a snapshot id).
  static constexpr uint64_t kOverlayBase = 1ull << 62;
  uint64_t OverlayNode(const std::string& path);
  // The dataset path a node names ("" = the root); NotFound/Stale as Resolve.
  Result<std::string> PathOf(uint64_t node) const;
  // The overlay's attributes of `path`, as node `node`.
  NodeAttr OverlayAttr(uint64_t node, const std::string& path, const Overlay::Entry& e) const;
  // The current snapshot's entry of `path`, unless the overlay hides it.
  std::optional<EntryView> OriginEntry(const Snapshot& snap, const std::string& path) const;
  // True when the overlay may hold the node's path: a node it made, or any
  // node once origin files can be taken over (--allow-overwrite) or hidden
  // (--allow-delete). Other nodes skip the path lookup on every READ.
  bool MayBeOverlaid(uint64_t node) const;
  // The overlay's read of `node`, or nullopt when the overlay does not hold it.
  std::optional<Result<size_t>> ReadOverlay(uint64_t node, uint64_t offset, std::span<char> out);
  // Drops the node id of a path the overlay no longer has.
  void ForgetOverlayPath(const std::string& path);
  // Create/Mkdir: the new entry's path (EEXIST when the name is taken), then
  // the attributes of what the overlay made (or the errno of `made`).
  int NewEntryPath(uint64_t parent, std::string_view name, std::string* path);
  int MadeEntry(const Status& made, const std::string& path, NodeAttr* attr);
  // Makes the origin file `path` an overlay file (--allow-overwrite).
  int Adopt(const std::string& path, bool truncate);
  Status ReadDirMerged(uint64_t node, uint64_t offset, const DirEntrySink& emit);

  CacheEngine* engine_;
  EngineFsOptions options_;
  Overlay* overlay_ = nullptr;
  // Guards overlay_paths_, overlay_ids_, next_overlay_, overlay_journal_fd_.
  // A leaf lock (the overlay's own locks are taken without it).
  mutable Mutex overlay_mu_;
  std::unordered_map<uint64_t, std::string> overlay_paths_ GUARDED_BY(overlay_mu_);
  std::unordered_map<std::string, uint64_t> overlay_ids_ GUARDED_BY(overlay_mu_);
  uint64_t next_overlay_ GUARDED_BY(overlay_mu_) = kOverlayBase + 1;
  // OpenOverlayNodeJournal; written under overlay_mu_.
  int overlay_journal_fd_ GUARDED_BY(overlay_mu_) = -1;
  void JournalOverlayNode(const std::string& line) REQUIRES(overlay_mu_);
  mutable SharedMutex versions_mu_;  // guards versions_, dropped_below_; a leaf lock
  std::vector<Version> versions_ GUARDED_BY(versions_mu_);  // oldest first; back() is current
  // Ids <= this belong to dropped versions.
  uint64_t dropped_below_ GUARDED_BY(versions_mu_) = 0;
  mutable std::atomic<uint64_t> opens_{0}, backing_offers_{0}, read_errors_{0}, stale_nodes_{0};

  // Nodes read from beyond the cache since TakeMiss last asked (TrackMisses).
  // A shard past kMaxMissed nodes is cleared: a file whose close never came
  // (still mapped, say) must not grow it for ever.
  static constexpr size_t kMissShards = 16;
  static constexpr size_t kMaxMissed = 1 << 16;
  struct MissShard {
    Mutex mu;  // a leaf lock
    std::unordered_set<uint64_t> nodes GUARDED_BY(mu);
  };
  void NoteMiss(uint64_t node);
  std::atomic<bool> track_misses_{false};
  std::array<MissShard, kMissShards> missed_;
};

}  // namespace granary
