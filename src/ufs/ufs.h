// UnderStorage: the narrow interface to where datasets live (S3-compatible
// stores, POSIX/NFS paths, HTTP). Everything above src/ufs talks to origins
// only through this class.
//
// An instance serves one root (a bucket, the filesystem root "/", or an HTTP
// host). Keys are paths inside the root without a leading slash; a dataset is
// (UnderStorage, key prefix).
//
// Public methods are non-virtual: they validate arguments, count requests,
// bytes and errors (stats()), then call the virtual *Impl. Implementations do
// their own retries; an error returned here is final for that call.
//
// Thread safety: every method may be called from many threads at once;
// implementations bound their own concurrency.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/status.h"

namespace granary {

// One object (file) at the origin.
struct ObjectInfo {
  std::string key;       // full key inside the root, no leading slash
  uint64_t size = 0;     // bytes
  int64_t mtime_ns = 0;  // last modification, nanoseconds since the epoch (0 if unknown)
  std::string etag;      // ETag / version token without quotes; posix: "<mtime_ns>-<size>"
};

struct ListRequest {
  std::string prefix;              // list keys starting with this (S3 semantics)
  std::string delimiter;           // "" = recursive; "/" = one level (common prefixes returned)
  std::string continuation_token;  // from the previous page; "" for the first
  int max_keys = 1000;             // page size hint (1..1000)
};

struct ListPage {
  std::vector<ObjectInfo> objects;           // in key order
  std::vector<std::string> common_prefixes;  // with delimiter: "dir/" entries, each ending in it
  std::string next_token;                    // "" when this is the last page
  uint64_t skipped_entries = 0;              // entries left out as invalid (e.g. a bad size)
};

// Counters of requests an instance sent to its origin. Monotonic.
struct UfsStats {
  uint64_t list_requests = 0;
  uint64_t stat_requests = 0;
  uint64_t read_requests = 0;
  uint64_t read_bytes = 0;
  uint64_t errors = 0;            // calls that returned a non-OK status
  uint64_t bad_list_entries = 0;  // listing entries skipped as invalid (ListPage::skipped_entries)
  uint64_t write_requests = 0;    // Write calls (one per object, however many parts)
  uint64_t write_bytes = 0;       // bytes of objects written
  uint64_t delete_requests = 0;
};

// How Write uploads (S3: objects larger than part_size go as a multipart
// upload of part_size parts, `parallel_parts` at once).
struct WriteOptions {
  uint64_t part_size = 8ull << 20;  // >= 5 MiB (S3's minimum part), at most 10,000 parts
  int parallel_parts = 8;
  // Once a part of a multipart upload is at the origin, write its bytes of
  // the source file to disk and drop them from the page cache (the staging
  // area: the origin holds them now, and a 2 GiB checkpoint should not push a
  // training node's dataset out of memory). Reads of the file still work, from disk.
  bool release_sent = false;
};

// A multipart upload fed while its file is still being written (S3): each
// part is sent in the background as soon as the writer has passed it, so a
// large file's upload overlaps its writing, and CompleteUpload then sends only
// the tail. The object appears whole at completion or not at all: destroying
// an upload that was not completed aborts it (waiting for parts in flight).
// The parts are read with pread from a duplicate of the source descriptor, so
// bytes of an added part must not change afterwards (a writer that goes back
// makes the caller drop the upload). Not thread-safe: one caller at a time.
class StreamingUpload {
 public:
  virtual ~StreamingUpload() = default;
  // The origin's id of the upload: kept by the caller so that one a crash left
  // unfinished can be aborted later (UnderStorage::AbortUpload).
  virtual const std::string& id() const = 0;
  // The part size this upload was started with.
  virtual uint64_t part_size() const = 0;
  // Queues part `index` (bytes [index*part_size, (index+1)*part_size) of the
  // file) for upload. Parts are added in order, each once, all full-sized.
  virtual void AddPart(uint64_t index) = 0;

 protected:
  friend class UnderStorage;
  // Adds the parts from the first one not added up to `size` (the last may be
  // short), waits for every part and completes the upload.
  virtual Result<ObjectInfo> Complete(uint64_t size) = 0;
};

class UnderStorage {
 public:
  virtual ~UnderStorage() = default;

  // "s3://bucket", "file:///", "http://host:8080": used in error messages.
  virtual std::string Root() const = 0;

  // One page of a listing.
  Result<ListPage> List(const ListRequest& request);

  // Size, mtime and etag of one object. NotFound when it does not exist.
  Result<ObjectInfo> Stat(std::string_view key);

  // Reads up to out.size() bytes at `offset` into `out`; returns the count,
  // which is short only at the end of the object. Offset past the end: 0.
  // `if_match`: the etag the caller expects (from a listing); when the origin
  // reports another one, the read fails with Stale (the object changed since
  // it was listed) instead of returning bytes of a different version. Empty
  // = no check; so is an origin that reports no etag for the read.
  // `xxh3` (may be null): set to the XXH3-64 of the bytes read when the
  // connector hashed them as they arrived, while they were in the CPU's
  // cache (HTTP and S3 do); left empty otherwise.
  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<char> out,
                      std::string_view if_match = {}, std::optional<uint64_t>* xxh3 = nullptr);

  // Convenience: the whole range [offset, offset+length) as a string.
  Result<std::string> ReadRange(std::string_view key, uint64_t offset, uint64_t length);

  // Every object under `prefix` (recursive), sorted by key. Large trees are
  // listed in parallel across common prefixes with up to `parallelism` workers.
  Result<std::vector<ObjectInfo>> ListAll(std::string_view prefix, int parallelism = 16);

  // Writes the object `key` from the local file `fd` (its first `size`
  // bytes, read with pread; the offset of fd is not used). The object
  // appears complete or not at all: S3 sends one PUT, or a multipart upload
  // whose parts each carry a checksum the origin verifies and which is
  // completed only after every part arrived (aborted on any failure); POSIX
  // writes a temporary name in the same directory, fsyncs it and renames it
  // into place. Returns the new object's info (etag as a later Stat gives it).
  // Unimplemented for read-only origins (HTTP).
  Result<ObjectInfo> Write(std::string_view key, int fd, uint64_t size,
                           const WriteOptions& options = {});
  // Deletes the object (OK when it does not exist). Unimplemented for
  // read-only origins.
  Status Delete(std::string_view key);

  // Starts a streaming upload of `key` from the file `fd` (duplicated: the
  // caller may close its own), options.part_size parts, options.parallel_parts
  // at once. Unimplemented where the origin has no multipart upload (POSIX,
  // HTTP): the caller uploads the whole file with Write instead.
  Result<std::unique_ptr<StreamingUpload>> StartUpload(std::string_view key, int fd,
                                                       const WriteOptions& options = {});
  // Sends the rest of the file (`size` bytes in all) and completes `upload`;
  // counted like one Write. On an error the upload is aborted.
  Result<ObjectInfo> CompleteUpload(StreamingUpload& upload, uint64_t size);
  // Aborts the upload `upload_id` of `key` that a crash left unfinished (its
  // parts cost storage until then). OK when it is gone already.
  Status AbortUpload(std::string_view key, std::string_view upload_id);

  UfsStats stats() const;

  // Stops the connector for shutdown: calls running now end soon (a stuck
  // transfer within about a second) and later calls fail at once, with
  // kCancelled. Irreversible. Default: nothing (calls end on their own
  // timeouts). Thread-safe.
  virtual void Abort() {}

  // True when every request ends on its own within a bounded time (the HTTP
  // and S3 connectors: their request timeout and low-speed abort), so a
  // caller that waits for a request anyway may run it on its own thread.
  // Default false: a POSIX origin's read of a hung NFS server may never
  // return, and only a waiter on another thread can give up on it.
  virtual bool BoundsRequestTime() const { return false; }

 protected:
  virtual Result<ListPage> ListImpl(const ListRequest& request) = 0;
  virtual Result<ObjectInfo> StatImpl(std::string_view key) = 0;
  // `xxh3` is never null here (Read passes its own when the caller gave none).
  virtual Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                                  std::string_view if_match, std::optional<uint64_t>* xxh3) = 0;

  virtual Result<ObjectInfo> WriteImpl(std::string_view key, int fd, uint64_t size,
                                       const WriteOptions& options) {
    return Unimplemented(Root() + ": this origin is read-only (writes are not supported)");
  }
  virtual Status DeleteImpl(std::string_view key) {
    return Unimplemented(Root() + ": this origin is read-only (deletes are not supported)");
  }
  virtual Result<std::unique_ptr<StreamingUpload>> StartUploadImpl(std::string_view key, int fd,
                                                                   const WriteOptions& options) {
    return Unimplemented(Root() + ": this origin has no multipart upload");
  }
  virtual Status AbortUploadImpl(std::string_view key, std::string_view upload_id) {
    return Unimplemented(Root() + ": this origin has no multipart upload");
  }

  // The Stale error a ReadImpl returns when the origin's etag for `what`
  // differs from if_match (one message for every implementation).
  static Status EtagMismatch(std::string_view what, std::string_view expected,
                             std::string_view got);

 private:
  Result<std::vector<ObjectInfo>> ListRecursive(const std::string& prefix);
  // The checks Write and StartUpload make on their arguments (InvalidArgument
  // naming the bad one).
  Status CheckWrite(std::string_view key, int fd, const WriteOptions& options) const;

  std::atomic<uint64_t> list_requests_{0};
  std::atomic<uint64_t> stat_requests_{0};
  std::atomic<uint64_t> read_requests_{0};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> bad_list_entries_{0};
  std::atomic<uint64_t> write_requests_{0};
  std::atomic<uint64_t> write_bytes_{0};
  std::atomic<uint64_t> delete_requests_{0};
};

}  // namespace granary
