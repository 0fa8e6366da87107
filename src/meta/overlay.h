// Overlay: the files and directories a writable mount created,
// layered over the snapshot, and the staging area that holds their bytes.
//
// A new file is staged whole in <staging dir>/<n>.data (any write pattern:
// seeks, rewrites, truncate, appends), described by <n>.meta (JSON: path,
// state). Commit() uploads it to the origin with UnderStorage::Write (the
// object appears whole or not at all) and marks it clean; the staged bytes
// then serve reads (no origin request) until `granary sync` lists the object
// into the snapshot and Fold() drops them. A staged file that is dirty after
// a crash is found again by Open(): one its writer had closed or fsynced
// (sealed) is uploaded by the next mount (RecoverPending); one still being
// written is never uploaded on its own (that would put a partial file at the
// origin): it stays pending, readable, until it is closed again through the
// mount or dropped with discard_pending.
//
// Streaming (S3 origins): while a file grows by appends only (a log, a
// checkpoint), each part_size part the writer has passed is sent at once as a
// part of a multipart upload, so close() waits only for the tail. Nothing is
// visible at the origin until the upload is completed at close or fsync; a
// write that goes back into sent bytes, or a truncate below them, aborts the
// upload and the file is sent whole at close instead. The upload's id is in
// the file's .meta, so an upload a crash left unfinished is aborted by the
// next mount. POSIX temporary names an
// interrupted upload left at the origin are removed first.
//
// Paths are relative to the dataset root ("log/workerlog.0"). The origin key
// of a path is <prefix><path>.
//
// Thread safety: every method may be called from many threads at once.
// mu_ guards the path maps; each file's own mutex guards its staged file,
// size and state (held across an upload, so writes wait for it). Lock order:
// a File's mu -> mu_.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "granary/status.h"
#include "ufs/ufs.h"

namespace granary {

// Bytes staged at once when the mount names no quota (--staging-quota).
inline constexpr uint64_t kDefaultStagingQuota = 10ull << 30;

struct OverlayOptions {
  // Directory of the staged files (created 0700). Required.
  std::string staging_dir;
  // Origin key prefix of the dataset ("" or ending in "/").
  std::string prefix;
  // Bytes staged at once (dirty and clean); writes past it fail with NoSpace.
  uint64_t quota = kDefaultStagingQuota;
  // Drop dirty staged files found at start instead of uploading them.
  bool discard_pending = false;
  // Staged bytes a multipart upload has sent leave the page cache (release_sent).
  WriteOptions upload{.release_sent = true};
};

struct OverlayStats {
  uint64_t files = 0;          // files in the overlay (staged, dirty or clean)
  uint64_t dirs = 0;           // directories created
  uint64_t pending_files = 0;  // dirty: not yet (completely) at the origin
  uint64_t pending_bytes = 0;
  uint64_t unclosed_files =
      0;  // of those, being written (not closed or fsynced since their last change)
  uint64_t staged_bytes = 0;  // all staged bytes (counted against the quota)
  uint64_t uploads = 0;       // uploads done
  uint64_t upload_failures = 0;
  uint64_t uploaded_bytes = 0;
  double upload_seconds = 0;  // time spent in uploads (throughput = bytes / seconds)
  uint64_t deletes = 0;       // origin objects deleted through the mount
};

class Overlay {
 public:
  struct File;  // opaque: one staged file

  // What a path is in the overlay.
  struct Entry {
    bool is_dir = false;
    bool whiteout = false;  // an origin object this mount deleted
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };

  // Creates the staging dir, loads the staged files found there (clean ones
  // serve reads again; dirty ones are pending), removes broken leftovers.
  static Result<std::unique_ptr<Overlay>> Open(OverlayOptions options,
                                               std::shared_ptr<UnderStorage> ufs);
  ~Overlay();

  // The entry of `path`, if the overlay has one.
  std::optional<Entry> Get(const std::string& path) const;
  // Children of directory `dir` ("" = root) the overlay adds or hides, by name.
  std::map<std::string, Entry> Children(const std::string& dir) const;

  // A new empty file at `path` (its parent directory must exist: the caller
  // checks). InvalidArgument when `path` is already in the overlay.
  Status Create(const std::string& path);
  // Makes an origin object writable: its current bytes (`initial`, empty
  // when truncated at open) become the staged file; `changed`: it differs
  // from the origin's already (truncated), so it is uploaded even unwritten.
  Status Adopt(const std::string& path, std::span<const char> initial, bool changed);
  Status Mkdir(const std::string& path);
  // Removes a file this mount created (deleting the uploaded object too).
  Status Unlink(const std::string& path);
  // Records that the origin object `path` was deleted (after ufs->Delete).
  Status Whiteout(const std::string& path);
  // Removes an empty directory this mount created.
  Status Rmdir(const std::string& path);

  Result<size_t> Write(const std::string& path, uint64_t offset, std::span<const char> data);
  Result<size_t> Read(const std::string& path, uint64_t offset, std::span<char> out) const;
  Status Truncate(const std::string& path, uint64_t size);
  // Uploads the file if it changed since its last upload. Errors: the
  // origin's (the staged data stays, dirty, and the next Commit retries).
  Status Commit(const std::string& path);
  // Uploads every sealed pending file (a mount's start: what a crash left).
  Status RecoverPending();

  // After a sync: clean staged files whose path the new snapshot has are
  // dropped (the snapshot serves them now; dirty ones stay), and whiteouts
  // of paths it no longer has.
  void Fold(const std::function<bool(const std::string& path)>& in_snapshot);

  OverlayStats stats() const;
  const std::string& staging_dir() const { return options_.staging_dir; }

 private:
  Overlay(OverlayOptions options, std::shared_ptr<UnderStorage> ufs);
  // Reads the staging directory into the maps. The analysis is off: it runs
  // in Open(), before any other thread can see this overlay or its files.
  Status Load() NO_THREAD_SAFETY_ANALYSIS;
  std::shared_ptr<File> FileOf(const std::string& path) const EXCLUDES(mu_);
  Status NewFile(const std::string& path, std::span<const char> initial, bool dirty, bool uploaded)
      EXCLUDES(mu_);
  // The methods taking a File are called with its mu held: REQUIRES(f.mu)
  // sits on their definitions (overlay.cc), where File is a complete type.
  void DropFile(const std::shared_ptr<File>& f);
  Status CommitFile(File& f);
  // Streaming uploads (S3; f.mu held): starts f's multipart upload (OK with
  // none started when the origin has no multipart upload), sends the parts an
  // appending writer has passed, drops the upload (aborting it) when sent
  // bytes change.
  Status BeginUpload(File& f);
  void StreamParts(File& f);
  void DropUpload(File& f);
  static constexpr uint64_t kMaxParts = 10000;  // S3's limit per upload
  Status WriteMeta(const File& f) const;
  void RemoveOriginTemps(const std::string& path) const;

  OverlayOptions options_;
  std::shared_ptr<UnderStorage> ufs_;
  // Guards files_, dirs_, whiteouts_, next_id_, stale_uploads_. Taken after a
  // File's mu when both are held (Unlink, Fold), never before one.
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<File>> files_ GUARDED_BY(mu_);
  struct Dir {
    int64_t mtime_ns = 0;
    uint64_t id = 0;  // of its <id>.meta; 0 = none (the parent of a staged file)
  };
  std::map<std::string, Dir> dirs_ GUARDED_BY(mu_);
  std::map<std::string, int64_t> whiteouts_ GUARDED_BY(mu_);
  // (origin key, upload id) of multipart uploads a stop left unfinished:
  // RecoverPending aborts them.
  std::vector<std::pair<std::string, std::string>> stale_uploads_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::atomic<bool> streaming_{true};  // false once the origin said it has no multipart upload
  std::atomic<uint64_t> staged_bytes_{0};
  std::atomic<uint64_t> uploads_{0}, upload_failures_{0}, uploaded_bytes_{0}, deletes_{0};
  std::atomic<uint64_t> upload_ns_{0};
};

}  // namespace granary
