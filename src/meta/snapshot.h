// Snapshot: the namespace of one dataset, i.e. the listing of its UFS prefix
// (relative path, size, mtime, etag per object), stored as one compact,
// versioned, checksummed file and served from an mmap of it. Lookups and
// readdir never touch the origin. Format: docs/format-snapshot.md.
//
// Inodes: every entry (directory or file) has an inode number; the root
// directory is inode 1 (FUSE_ROOT_ID). Entries are laid out breadth-first,
// sorted by (parent inode, name bytes), so each directory's children are one
// contiguous, name-sorted range: Lookup is a binary search, ReadDir a slice,
// and inode = record index + 1. Inode numbers are stable within a version (the
// same file always gives the same numbers); a new version (Rebuild) may
// renumber everything.
//
// Directories are derived from the object paths. Keys that are not valid
// relative paths ("a//b", ".", "..", empty or >255-byte names, NUL bytes),
// directory markers (keys ending in "/") and files whose path is also a
// directory are skipped and counted (skipped()).
//
// Ownership: a Snapshot owns its mapping; EntryView's string_views point into
// it and stay valid as long as the Snapshot object lives, even after the file
// was replaced or deleted (Rebuild renames a new file over the old one).
//
// Thread safety: immutable after construction; every const method may be
// called from any number of threads at once. Build/Load/Rebuild may run
// concurrently with readers of other Snapshot objects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "granary/status.h"
#include "ufs/ufs.h"

namespace granary {

namespace snapshot_format {
struct Record;  // snapshot_format.h
}  // namespace snapshot_format

struct SnapshotOptions {
  // Where the dataset lives, as the user wrote it ("s3://bucket/imagenet");
  // stored in the header and used in messages. Required.
  std::string source_uri;
  // UFS key prefix of the dataset inside ufs.Root(). "" = the whole root. A
  // non-empty prefix is treated as a directory: "imagenet" and "imagenet/" both
  // mean the keys under "imagenet/".
  std::string prefix;
  // Workers listing sub-prefixes of the origin in parallel (>= 1).
  int list_parallelism = 16;
};

// One entry as seen by readers. Strings point into the Snapshot's mapping.
struct EntryView {
  uint64_t ino = 0;          // this entry's inode (root = 1)
  uint64_t parent = 0;       // parent directory's inode (root's parent is the root)
  bool is_dir = false;       // directory derived from paths, or a file (an object)
  std::string_view name;     // last path component; "" for the root
  uint64_t size = 0;         // files: object size in bytes; dirs: 0
  int64_t mtime_ns = 0;      // files: object mtime (ns since epoch); dirs: 0
  std::string_view etag;     // files: origin etag/version token; dirs: ""
  uint64_t child_count = 0;  // dirs: number of children; files: 0
};

// What a build skipped, by reason (also stored in the file).
struct SnapshotSkips {
  uint64_t invalid_names = 0;       // key is not a valid relative path
  uint64_t dir_markers = 0;         // key equals the prefix (its own directory marker)
  uint64_t file_dir_conflicts = 0;  // file "a/b" next to "a/b/...": the directory wins
  uint64_t total() const { return invalid_names + dir_markers + file_dir_conflicts; }
};

class Snapshot {
 public:
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  // Lists options.prefix on `ufs` (in parallel) and writes snapshot `version`
  // to file_path atomically (temp file, fsync, rename, directory fsync), then
  // returns it mapped. Errors: the listing's error; IoError for local I/O;
  // InvalidArgument for bad options or more than 2^32-2 entries.
  static Result<std::unique_ptr<Snapshot>> Build(UnderStorage& ufs, const SnapshotOptions& options,
                                                 const std::string& file_path, uint64_t version);

  // Like Build, from an already-made listing (full keys, any order). For tests
  // and benchmarks, and callers that already hold a listing.
  static Result<std::unique_ptr<Snapshot>> BuildFromEntries(std::vector<ObjectInfo> objects,
                                                            const SnapshotOptions& options,
                                                            const std::string& file_path,
                                                            uint64_t version);

  // Maps and validates file_path (magic, format version, sizes, checksums,
  // record bounds). NotFound if it does not exist; Corruption naming the file
  // and the problem if it is truncated or damaged; IoError otherwise.
  static Result<std::unique_ptr<Snapshot>> Load(const std::string& file_path);

  // Load; if the file is missing, Build version 1; if it is corrupt (warning
  // logged) or was built for another source_uri/prefix, build anew from the
  // origin with the next version number. Errors: those of Build.
  static Result<std::unique_ptr<Snapshot>> LoadOrBuild(UnderStorage& ufs,
                                                       const SnapshotOptions& options,
                                                       const std::string& file_path);

  // `granary sync`: lists the origin again with old's source_uri and prefix and
  // atomically replaces file_path with version old.version()+1. `old` stays
  // valid (its own mapping) until destroyed. `list_parallelism` as in options.
  static Result<std::unique_ptr<Snapshot>> Rebuild(UnderStorage& ufs, const Snapshot& old,
                                                   const std::string& file_path,
                                                   int list_parallelism = 16);

  // Inode of the child `name` of directory `parent_ino`; nullopt if there is
  // none or parent_ino is not a directory.
  std::optional<uint64_t> Lookup(uint64_t parent_ino, std::string_view name) const;

  // Inode of a relative path such as "train/n01/x.JPEG"; "" is the root. Empty
  // components (leading, trailing or doubled "/") are ignored.
  std::optional<uint64_t> FindPath(std::string_view relative_path) const;

  // The entry of an inode; nullopt when ino is 0 or > max_ino().
  std::optional<EntryView> Get(uint64_t ino) const;

  // Relative path of an inode ("train/n01/x.JPEG"); "" for the root or an
  // unknown inode.
  std::string Path(uint64_t ino) const;

  // The origin key of an inode: prefix (normalized, with its "/") + Path(ino).
  std::string Key(uint64_t ino) const;

  // Children of directory dir_ino in name order, from position `offset`
  // (0-based), at most `max` of them. Empty at the end, or when dir_ino is not
  // a directory.
  std::vector<EntryView> ReadDir(uint64_t dir_ino, uint64_t offset, size_t max) const;

  // Calls fn for every file (not directory) in inode order.
  void ForEachFile(const std::function<void(const EntryView&)>& fn) const;

  uint64_t version() const { return version_; }
  int64_t created_ns() const { return created_ns_; }
  uint64_t file_count() const { return file_count_; }
  uint64_t dir_count() const { return dir_count_; }  // includes the root
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t max_ino() const { return entry_count_; }  // inodes are 1..max_ino()
  const std::string& source_uri() const { return source_uri_; }
  const std::string& prefix() const { return prefix_; }  // normalized: "" or ends in "/"
  const SnapshotSkips& skipped() const { return skipped_; }
  const std::string& file_path() const { return file_path_; }
  uint64_t file_size() const { return map_size_; }

 private:
  using Record = snapshot_format::Record;
  Snapshot() = default;
  static Result<std::unique_ptr<Snapshot>> FromFd(int fd, const std::string& name);
  Status Validate(const std::string& name);
  const Record* record(uint64_t ino) const;
  EntryView View(uint64_t ino) const;

  void* map_ = nullptr;  // the whole file, PROT_READ, MAP_SHARED
  uint64_t map_size_ = 0;
  const Record* records_ = nullptr;  // entry_count_ records; inode i is records_[i - 1]
  const char* strings_ = nullptr;    // string table
  uint64_t strings_size_ = 0;
  uint64_t entry_count_ = 0;
  uint64_t version_ = 0;
  int64_t created_ns_ = 0;
  uint64_t file_count_ = 0;
  uint64_t dir_count_ = 0;
  uint64_t total_bytes_ = 0;
  SnapshotSkips skipped_;
  std::string source_uri_;
  std::string prefix_;
  std::string file_path_;
};

}  // namespace granary
