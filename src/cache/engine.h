// CacheEngine: the read path of one dataset (DESIGN §3.4).
//
//   Read(ino, offset, out): snapshot lookup (inode -> key, size, etag)
//     -> store hit: serve from the cache file
//     -> miss: single-flight fetch per (object, block) from the origin, so N
//        concurrent readers of one cold block cause one origin request; the
//        bytes go to every waiting reader first and are admitted to the store
//        concurrently (on the admission pool).
//   Fetch(ino): makes the whole object cached (warm-up, readahead); joins any
//     in-flight fetch of the same block instead of fetching twice.
//
// All origin I/O passes one PrioritySemaphore (options.origin_concurrency
// permits): demand reads (Priority::kHigh) always go before warm-up and
// readahead (Priority::kLow). Origin errors (after the connector's retries)
// fail only the read that needed them.
//
// Large objects (size > block_size) are fetched and cached block by block; a
// sequential reader triggers readahead of the next readahead_blocks blocks.
//
// Snapshot versions: the engine serves the current snapshot (ino-only calls)
// and, for callers that hold an older version (`granary sync` replaced it
// while the kernel or a load still used its inodes), any version passed
// explicitly. A block's flight is keyed by (snapshot version, inode, block);
// every origin read carries the listed etag, so a changed object fails with
// Stale instead of mixing versions.
//
// Concurrency model: every public method is thread-safe; FUSE threads call
// Read and block on the single-flight result (bounded by the origin's
// timeouts). flights_mu_ guards flights_; each Flight's mu guards its fields;
// seq_mu_ guards last_end_. Lock order: flights_mu_ -> Flight::mu (never the
// other way). The store and snapshot have their own thread-safety contracts.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "common/priority_semaphore.h"
#include "common/thread_pool.h"
#include "granary/status.h"
#include "meta/snapshot.h"
#include "store/store.h"
#include "ufs/ufs.h"

namespace granary {

struct EngineOptions {
  // Dataset name in store keys (a store may hold several datasets).
  std::string dataset = "default";
  // Origin requests in flight at most (demand + warm-up together).
  int origin_concurrency = 64;
  // Blocks fetched ahead of a sequential reader of a large object (0 = off).
  int readahead_blocks = 4;
  // Threads admitting fetched bytes to the store off the read path.
  int admission_threads = 2;

  Status Validate() const;
};

// Upper bounds (seconds) of the origin request latency histogram; one more
// bucket (+Inf) follows the last.
inline constexpr std::array<double, 12> kOriginLatencyBounds = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0};
inline constexpr size_t kOriginLatencyBuckets = kOriginLatencyBounds.size() + 1;
inline constexpr size_t kStatusCodes = 12;  // Code values 0..11

// Engine counters (monotonic since start) plus the dataset's totals.
struct EngineStats {
  uint64_t ufs_files = 0;        // files in the snapshot
  uint64_t ufs_bytes = 0;        // bytes in the snapshot
  uint64_t reads = 0;            // Read calls
  uint64_t hit_reads = 0;        // Read calls served entirely from the store
  uint64_t miss_reads = 0;       // Read calls that needed the origin (or a flight)
  uint64_t hit_bytes = 0;        // bytes served from the store
  uint64_t miss_bytes = 0;       // bytes served from fetched blocks
  uint64_t read_errors = 0;      // Read calls that failed
  uint64_t origin_requests = 0;  // block GETs sent to the origin
  uint64_t origin_bytes = 0;     // bytes received from the origin
  uint64_t origin_errors = 0;    // block GETs that failed (after retries)
  uint64_t flight_joins = 0;     // times a reader waited on another's fetch
  uint64_t admitted = 0;         // blocks the store accepted
  uint64_t not_admitted = 0;     // blocks the store refused (policy / space)
  uint64_t admit_errors = 0;     // admissions that failed with an error
  // Origin GET latency (the UFS call, not the wait for a slot): count per
  // bucket of kOriginLatencyBounds (not cumulative; last = +Inf) and the sum.
  std::array<uint64_t, kOriginLatencyBuckets> origin_latency_buckets{};
  double origin_latency_sum_s = 0;
  // origin_errors by Code (index = static_cast<int>(code)).
  std::array<uint64_t, kStatusCodes> origin_errors_by_code{};
};

class CacheEngine {
 public:
  using SnapshotPtr = std::shared_ptr<const Snapshot>;

  // Borrows `store` (must outlive the engine); shares the UFS and snapshot.
  CacheEngine(std::shared_ptr<UnderStorage> ufs, std::shared_ptr<const Snapshot> snapshot,
              Store* store, EngineOptions options);
  // Waits for pending admissions.
  ~CacheEngine();
  CacheEngine(const CacheEngine&) = delete;
  CacheEngine& operator=(const CacheEngine&) = delete;

  // Reads up to out.size() bytes of file `ino` at `offset`; short only at the
  // end of the file. InvalidArgument for a directory, NotFound for an unknown
  // inode, the origin's error if a needed block could not be fetched.
  Result<size_t> Read(uint64_t ino, uint64_t offset, std::span<char> out,
                      Priority priority = Priority::kHigh) {
    return Read(snapshot(), ino, offset, out, priority);
  }
  // The same for inode `ino` of snapshot `snap` (current or older).
  Result<size_t> Read(const SnapshotPtr& snap, uint64_t ino, uint64_t offset, std::span<char> out,
                      Priority priority = Priority::kHigh);

  // Makes file `ino` fully cached. true: cached (or already was); false: the
  // store refused part of it (policy or no space). Errors: origin errors.
  Result<bool> Fetch(uint64_t ino, Priority priority = Priority::kLow) {
    return Fetch(snapshot(), ino, priority);
  }
  Result<bool> Fetch(const SnapshotPtr& snap, uint64_t ino, Priority priority = Priority::kLow);

  // True if file `ino` is completely cached.
  bool IsCached(uint64_t ino) const { return IsCached(*snapshot(), ino); }
  bool IsCached(const Snapshot& snap, uint64_t ino) const;

  // For passthrough: an fd of the complete cache file of `ino` (caller closes),
  // or NotFound when it is not (completely) cached.
  Result<int> OpenCachedFile(uint64_t ino) { return OpenCachedFile(*snapshot(), ino); }
  Result<int> OpenCachedFile(const Snapshot& snap, uint64_t ino);
  // The same check, returning the cache file's path instead of an fd.
  Result<std::string> CachedFilePath(const Snapshot& snap, uint64_t ino);

  // The store identity of a file entry of `snap` (default: the current one).
  ObjectKey KeyOf(const EntryView& entry) const { return KeyOf(*snapshot(), entry); }
  ObjectKey KeyOf(const Snapshot& snap, const EntryView& entry) const;

  // The current snapshot. Hold the pointer while using its EntryViews.
  SnapshotPtr snapshot() const { return snapshot_.load(); }
  // Makes `next` current (`granary sync`). Calls already running, and callers
  // holding the old pointer, keep using the old version.
  void SetSnapshot(SnapshotPtr next) { snapshot_.store(std::move(next)); }
  Store& store() { return *store_; }
  UnderStorage& ufs() { return *ufs_; }
  EngineStats stats() const;

  // Called with the bytes of each block fetched from the origin for a reader
  // still to come (warm-up, readahead) before they are admitted; `offset` is
  // the block's offset in file `ino` of `snap`. Returns true if it handed the
  // bytes to whoever will read them (the FUSE layer puts them into the
  // mount's page cache): the admission then needs no page-cache copy of its
  // own (Store::AdmitBlock's `served`). Set it before the engine serves any
  // read; it runs on fetching threads, concurrently.
  using FetchedHook = std::function<bool(const Snapshot& snap, uint64_t ino, uint64_t offset,
                                         std::string_view bytes)>;
  void SetFetchedHook(FetchedHook hook) { fetched_hook_ = std::move(hook); }

 private:
  struct Flight;
  using FlightKey = std::pair<uint64_t, uint64_t>;  // (VersionedIno, block index)
  struct FlightKeyHash {
    size_t operator()(const FlightKey& k) const { return k.first * 0x9E3779B97F4A7C15ull ^ k.second; }
  };
  using BlockData = std::shared_ptr<const std::string>;

  // The bytes of one block: joins or leads a flight. If `wait_admission`, also
  // waits for the store's answer and returns it in *admitted.
  Result<BlockData> GetBlock(const Snapshot& snap, const EntryView& e, uint64_t block, Priority p,
                             bool wait_admission, bool* admitted);
  Result<BlockData> FetchBlock(const EntryView& e, const ObjectKey& key, uint64_t block, Priority p);
  // `served`: the bytes already went to the reader that asked (see
  // Store::AdmitBlock).
  void Admit(const std::shared_ptr<Flight>& f, const ObjectKey& key, uint64_t block, BlockData data,
             FlightKey fk, bool served);
  void MaybeReadahead(const SnapshotPtr& snap, const EntryView& e, uint64_t offset, uint64_t end);
  // (snapshot version, inode) in one number: inodes are < 2^32.
  static uint64_t VersionedIno(const Snapshot& snap, uint64_t ino) {
    return snap.version() << 32 | ino;
  }
  uint64_t BlockCount(uint64_t size) const;
  void RecordOriginLatency(std::chrono::nanoseconds d);

  std::shared_ptr<UnderStorage> ufs_;
  std::atomic<SnapshotPtr> snapshot_;
  Store* store_;
  EngineOptions options_;
  uint64_t block_size_;
  PrioritySemaphore origin_slots_;
  FetchedHook fetched_hook_;

  std::mutex flights_mu_;  // guards flights_
  std::unordered_map<FlightKey, std::shared_ptr<Flight>, FlightKeyHash> flights_;

  std::mutex seq_mu_;  // guards last_end_
  std::unordered_map<uint64_t, uint64_t> last_end_;  // VersionedIno -> end of its last read (large files)

  struct Counters {
    std::atomic<uint64_t> reads{0}, hit_reads{0}, miss_reads{0}, hit_bytes{0}, miss_bytes{0},
        read_errors{0}, origin_requests{0}, origin_bytes{0}, origin_errors{0}, flight_joins{0},
        admitted{0}, not_admitted{0}, admit_errors{0}, origin_latency_sum_ns{0};
    std::array<std::atomic<uint64_t>, kOriginLatencyBuckets> origin_latency_buckets{};
    std::array<std::atomic<uint64_t>, kStatusCodes> origin_errors_by_code{};
  };
  mutable Counters c_;

  // Declared last: destroyed first, so queued admissions finish while the
  // members they use are alive.
  std::unique_ptr<ThreadPool> admission_pool_;
  std::unique_ptr<ThreadPool> readahead_pool_;
};

}  // namespace granary
