// ApiService: what the native client API (include/granary/client.h) does on
// the side that holds the engine — an in-process Client, or the daemon's
// ApiServer for attached clients. Resolves paths against the snapshot served
// now, hands out descriptors of complete cache files (fetching first), reads
// through the engine what the store will not keep, and runs the epoch-aware
// prefetcher. Loads and status are the control ops' (control/control.h).
//
// Paths are relative to the dataset root; leading, trailing and doubled "/"
// are ignored; "." and ".." components are refused (InvalidArgument).
//
// Thread safety: every method may be called from many threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/engine.h"
#include "common/mutex.h"
#include "granary/dataset.h"
#include "granary/status.h"

namespace granary {

// A file a client opened: the complete cache file's descriptor (fd >= 0,
// owned by the receiver) or fd = -1 when the store did not keep it (read it
// with ApiService::Read) or it is empty.
struct OpenedFile {
  int fd = -1;
  uint64_t size = 0;
  uint64_t ino = 0;
  uint64_t version = 0;  // the snapshot version `ino` belongs to
};

// What an attached client needs to open complete small cache files itself
// instead of asking for each (docs/api.md, "Reads without the daemon"): the
// snapshot file to map, and the store's file layout (Store::FileLayout).
struct DirectLayout {
  std::string snapshot_path;  // the current version's file (sync renames a new one over it)
  uint64_t version = 0;       // the version served now
  std::string dataset;        // the dataset name in the store's object keys
  Store::FileLayout files;
};

// Fetches a given order of files ahead of the readers (Client::Prefetch).
// At most `window` files fetched by it and not yet read are kept ahead of the
// readers' position (the highest index of the order read so far + 1); files
// already cached when reached cost nothing and do not count. A new order
// replaces the old one (its fetches in flight finish).
class Prefetcher {
 public:
  // Borrows `engine`. `threads` fetch at once (started by the first SetOrder).
  Prefetcher(CacheEngine* engine, int threads);
  // Stops and joins (fetches in flight finish first).
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void SetOrder(std::shared_ptr<const Snapshot> snap, std::vector<uint64_t> inos, size_t window);
  // A reader read `ino` (of the current order's snapshot): moves the position.
  void NoteRead(uint64_t ino);
  PrefetchProgress progress() const;
  // How many reads a client that opens files itself may gather before it
  // tells the daemon (ApiService::NoteDirectReads): an eighth of the window
  // (at least 1) while an order is being read, so the position the window
  // counts from does not lag the readers by the window; else kTouchBatch.
  static constexpr size_t kTouchBatch = 64;
  size_t touch_batch() const;

 private:
  void Worker() EXCLUDES(mu_);
  void Advance(size_t to) REQUIRES(mu_);

  CacheEngine* engine_;
  const int nthreads_;
  // Guards everything below; not held while a file is fetched, so a leaf.
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  std::shared_ptr<const Snapshot> snap_ GUARDED_BY(mu_);
  std::vector<uint64_t> order_ GUARDED_BY(mu_);
  // Per order index: 0 pending, 1 fetched by us, 2 cached/failed.
  std::vector<uint8_t> state_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, size_t> index_ GUARDED_BY(mu_);  // ino -> its first index in order_
  size_t window_ GUARDED_BY(mu_) = 0;
  size_t next_ GUARDED_BY(mu_) = 0;      // next order index to take
  size_t position_ GUARDED_BY(mu_) = 0;  // readers' position
  size_t ahead_ GUARDED_BY(mu_) = 0;     // fetched by us (or in flight) at index >= position_
  PrefetchProgress totals_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

class ApiService {
 public:
  // Borrows `engine`.
  explicit ApiService(CacheEngine* engine, int prefetch_threads = 32);
  ~ApiService();

  DatasetInfo Info() const;
  Result<FileInfo> Stat(std::string_view path) const;
  Result<std::vector<FileInfo>> List(std::string_view dir, bool recursive) const;
  // Resolves, fetches the file into the cache if it is not (joining any fetch
  // in flight) and opens its cache file.
  Result<OpenedFile> Open(std::string_view path);
  // Reads through the engine (for files Open returned fd -1 for).
  Result<size_t> Read(std::string_view path, uint64_t offset, std::span<char> out);
  Status Prefetch(const std::vector<std::string>& paths, size_t window);
  DirectLayout Direct() const;
  // An attached client read these files (inodes of snapshot `version`) from
  // cache files it opened itself: they count as recently used, and the
  // prefetcher's position moves past them. Inodes of another version than the
  // one served now are ignored. Returns the version served now.
  uint64_t NoteDirectReads(uint64_t version, const std::vector<uint64_t>& inos);
  size_t TouchBatch() const { return prefetcher_.touch_batch(); }
  PrefetchProgress PrefetchStatus() const { return prefetcher_.progress(); }

  CacheEngine* engine() { return engine_; }

  // Since start: files opened for clients (Open), and reads clients made of
  // files they opened themselves (NoteDirectReads of the version served).
  struct Counters {
    uint64_t opens = 0;
    uint64_t direct_reads = 0;
  };
  Counters counters() const {
    return Counters{.opens = opens_.load(std::memory_order_relaxed),
                    .direct_reads = direct_reads_.load(std::memory_order_relaxed)};
  }

 private:
  struct Resolved {
    std::shared_ptr<const Snapshot> snap;
    uint64_t ino = 0;
    EntryView entry;
  };
  Result<Resolved> Resolve(std::string_view path) const;

  CacheEngine* engine_;
  Prefetcher prefetcher_;
  std::atomic<uint64_t> opens_{0};
  std::atomic<uint64_t> direct_reads_{0};
};

// "a/b/c" from "/a//b/c/" style input; InvalidArgument for "..", ".", NUL.
Result<std::string> NormalizeApiPath(std::string_view path);

}  // namespace granary
