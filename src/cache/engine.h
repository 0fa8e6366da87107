// CacheEngine: the read path of one dataset.
//
//   Read(ino, offset, out): snapshot lookup (inode -> key, size, etag)
//     -> store hit: serve from the cache file
//     -> miss: single-flight fetch per block, keyed by the object's identity
//        (dataset, key, etag, block), so concurrent readers of one cold block,
//        a warm-up and a peer's request for it cause one fetch; the bytes go
//        to every waiter first and are admitted to the store concurrently (on
//        the admission pool).
//   Fetch(ino): makes the whole object cached (warm-up, readahead); joins any
//     in-flight fetch of the same block instead of fetching twice.
//   ServePeer / WarmForPeer: the same for another cluster node's request.
//
// Block sources, asked in order (block_source.h): the local store, the
// cluster (the block's owner peer, when SetCluster installed one), the origin
// (OriginSource: its PrioritySemaphore of options.origin_concurrency permits
// puts demand reads (Priority::kHigh) before warm-up and readahead). A block
// that came from a peer, or that this node fetched for an object another node
// owns, is admitted as a near copy (AdmitKind::kNear: free space only).
// Requests from peers never go to the cluster source again (no loops), and
// what they fetch is admitted as owned. Origin errors fail only the read that
// needed them; peer errors never fail a read.
//
// Large objects (size > block_size) are fetched and cached block by block,
// and stream: per file, ReadaheadWindows follows each sequential reader
// (several per object for parallel range readers) and the engine keeps that
// reader's window of blocks fetched ahead -- one block at first, doubling up
// to readahead_blocks while the reader keeps up, halved when the readahead
// memory (readahead_memory_bytes) is spent. Each block is fetched once: a
// readahead joins a reader's flight and a reader joins a readahead's. A cache
// disk slower than the origin slows the fetches (they wait for room in the
// admission queue), it never makes the engine drop a block it fetched.
// When the mount takes fetched bytes into its page cache (SetFetchedHook),
// readahead also reads blocks already in the store -- a fresh mount over a
// warm cache -- in one piece each and pushes them, unless it pushed them
// before.
//
// Snapshot versions: the engine serves the current snapshot (ino-only calls)
// and, for callers that hold an older version (`granary sync` replaced it
// while the kernel or a load still used its inodes), any version passed
// explicitly. Every origin read carries the listed etag, so a changed object
// fails with Stale instead of mixing versions.
//
// Concurrency model: every public method is thread-safe. A flight's fetch
// runs on a fetch thread (fetchers_, started on demand), never on a reader's
// (a warm-up, Fetch() at low priority, over an origin that BoundsRequestTime() runs its own:
// it waits for the fetch and the admission anyway and has nothing to cancel):
// every reader, the one that started the flight included, waits for the
// flight's result at most options.origin_timeout (then Unavailable, EIO) and
// leaves at once when its CancelToken is cancelled (Cancelled, EINTR), while
// the fetch goes on for the others and is admitted as usual. The fetch's wait
// for an origin permit ends at the same deadline; the origin request itself
// is bounded by the connector's own timeouts. Shutdown() (and the destructor)
// cancels every permit wait and waits for the fetches in flight.
// Locks (each member says what it guards, GUARDED_BY, checked by Clang):
// flights_mu_ guards flights_; each Flight's mu guards its fields. Lock
// order: flights_mu_ -> Flight::mu (never the other way); admission_mu_,
// pushed_mu_ and calls_mu_ are leaves. A CancelToken's mutex is taken
// before Flight::mu (its wake-up takes it). The store and snapshot have
// their own thread-safety contracts.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "cache/block_source.h"
#include "cache/origin_source.h"
#include "cache/readahead.h"
#include "common/cancel.h"
#include "common/elastic_pool.h"
#include "common/mutex.h"
#include "common/origin_defaults.h"
#include "common/priority_semaphore.h"
#include "common/thread_pool.h"
#include "granary/status.h"
#include "meta/snapshot.h"
#include "store/store.h"
#include "ufs/ufs.h"

namespace granary {

inline constexpr std::chrono::seconds kDefaultOriginTimeout{60};

struct EngineOptions {
  // Dataset name in store keys (a store may hold several datasets).
  std::string dataset = "default";
  // Origin requests in flight at most (demand + warm-up together).
  int origin_concurrency = kDefaultOriginConcurrency;
  // Blocks fetched ahead of a sequential reader of a large object at most:
  // the window starts at one block and doubles while the reader keeps up
  // (0 = no readahead).
  int readahead_blocks = 16;
  // Bytes of readahead fetches in flight at most, every file together
  // (0 = no limit): past it a stream's window is halved instead.
  uint64_t readahead_memory_bytes = 512ull << 20;
  // Threads admitting fetched bytes to the store off the read path.
  int admission_threads = 2;
  // How long a read waits for a block from the origin (the wait for an
  // origin permit and the transfer together) before it fails with
  // Unavailable (EIO through the mount). The transfer goes on and its bytes
  // are still cached.
  std::chrono::milliseconds origin_timeout{kDefaultOriginTimeout};
  // Bytes of fetched blocks waiting for admission at most (a cache disk
  // slower than the origin): past it the fetch that brought the next block
  // waits for room (its reader already has the bytes), so fetching slows
  // down to the disk's pace and no block is dropped. 0 = no limit.
  uint64_t admission_queue_bytes = 256ull << 20;
  // Blocks waiting for admission at most (small files: the byte cap alone
  // would let millions of tiny ones queue); the same wait. 0 = no limit.
  int admission_queue_blocks = 16384;

  Status Validate() const;
};

// Engine counters (monotonic since start) plus the dataset's totals.
struct EngineStats {
  uint64_t ufs_files = 0;         // files in the snapshot
  uint64_t ufs_bytes = 0;         // bytes in the snapshot
  uint64_t reads = 0;             // Read calls
  uint64_t hit_reads = 0;         // Read calls served entirely from the store
  uint64_t miss_reads = 0;        // Read calls that needed the origin (or a flight)
  uint64_t hit_bytes = 0;         // bytes served from the store
  uint64_t miss_bytes = 0;        // bytes served from fetched blocks
  uint64_t read_errors = 0;       // Read calls that failed
  uint64_t read_waits_ended = 0;  // waits for a block ended by origin_timeout or a cancel
  uint64_t origin_requests = 0;   // block GETs sent to the origin
  uint64_t origin_bytes = 0;      // bytes received from the origin
  uint64_t origin_errors = 0;     // block GETs that failed (after retries)
  uint64_t flight_joins = 0;      // times a reader waited on another's fetch
  uint64_t admitted = 0;          // blocks the store accepted
  uint64_t not_admitted = 0;      // blocks not kept: the store refused them (policy / space), or
                                  // near copies left out while the admission queue was full
  uint64_t admit_errors = 0;      // admissions that failed with an error
  uint64_t admission_waits = 0;   // fetches that waited for room in the admission queue
  uint64_t admission_pending_bytes = 0;  // gauge: fetched bytes waiting for admission now
  uint64_t readahead_started = 0;        // readahead blocks started
  uint64_t readahead_dropped = 0;        // readahead blocks not started: readahead memory was spent
  uint64_t readahead_pending_bytes = 0;  // gauge: bytes of readahead fetches in flight now
  uint64_t near_admitted = 0;            // of `admitted`: near copies of blocks other nodes own
  uint64_t peer_blocks = 0;              // blocks received from owner peers (remote hits)
  uint64_t peer_bytes = 0;               // their bytes
  uint64_t peer_fallbacks = 0;           // blocks the cluster could not supply (-> origin)
  uint64_t served_blocks = 0;            // blocks served to peers
  uint64_t served_hits = 0;    // of those, straight from this node's store (no origin fetch)
  uint64_t served_bytes = 0;   // their bytes
  uint64_t served_errors = 0;  // peer requests that failed here
  // Origin GET latency (the UFS call, not the wait for a slot): count per
  // bucket of kOriginLatencyBounds (not cumulative; last = +Inf) and the sum.
  std::array<uint64_t, kOriginLatencyBuckets> origin_latency_buckets{};
  double origin_latency_sum_s = 0;
  // origin_errors by Code (index = static_cast<int>(code)).
  std::array<uint64_t, kStatusCodes> origin_errors_by_code{};
};

// What ServePeer hands the peer server: a region of an open cache file (sent
// from the file) or the bytes.
struct ServedBlock {
  BlockData bytes;           // set when fd < 0
  int fd = -1;               // owned by the receiver, who closes it
  uint64_t file_offset = 0;  // region of fd holding the block
  uint64_t length = 0;
  uint64_t checksum = 0;  // with fd: XXH3-64 of the region (the store's record)
};

class CacheEngine {
 public:
  using SnapshotPtr = std::shared_ptr<const Snapshot>;

  // Borrows `store` (must outlive the engine); shares the UFS and snapshot.
  CacheEngine(std::shared_ptr<UnderStorage> ufs, std::shared_ptr<const Snapshot> snapshot,
              Store* store, EngineOptions options);
  // Removes the store's ownership oracles SetCluster installed, then waits
  // for pending admissions.
  ~CacheEngine();
  CacheEngine(const CacheEngine&) = delete;
  CacheEngine& operator=(const CacheEngine&) = delete;

  // Installs the cluster block source, between the local store and the
  // origin, and the store's ownership oracles, object and block (null:
  // removes them all). Call
  // before the engine serves anyone, reads and peers alike.
  void SetCluster(std::shared_ptr<ClusterSource> cluster);
  ClusterSource* cluster() const { return cluster_.get(); }

  // Reads up to out.size() bytes of file `ino` at `offset`; short only at the
  // end of the file. InvalidArgument for a directory, NotFound for an unknown
  // inode, the origin's error if a needed block could not be fetched. Bytes
  // of `out` past the returned count may be overwritten (Store::Read).
  Result<size_t> Read(uint64_t ino, uint64_t offset, std::span<char> out,
                      Priority priority = Priority::kHigh) {
    return Read(snapshot(), ino, offset, out, priority);
  }
  // The same for inode `ino` of snapshot `snap` (current or older).
  // `cancel` (may be null): cancelling it makes a read waiting for a block
  // return Cancelled at once (the fetch goes on for other readers).
  // `beyond_cache` (may be null): set to true when some of the bytes came
  // from beyond this node's cache (the origin or a peer), else left as is.
  Result<size_t> Read(const SnapshotPtr& snap, uint64_t ino, uint64_t offset, std::span<char> out,
                      Priority priority = Priority::kHigh, CancelToken* cancel = nullptr,
                      bool* beyond_cache = nullptr);

  // Read, when it needs no fetch: the range is in the local store, or past
  // the end of the file (a directory or an unknown inode too: the answer is
  // at once). nullopt when a block must be fetched; nothing is counted then,
  // so the Read that follows counts the miss once. One lookup of the object
  // in the store, for a FUSE thread that answers hits itself.
  std::optional<Result<size_t>> ReadLocal(const SnapshotPtr& snap, uint64_t ino, uint64_t offset,
                                          std::span<char> out);

  // Ends every read's wait for a block and every fetch's wait for an origin
  // permit (Cancelled), now and later; does not wait for anything.
  void CancelWaits() { shutdown_.Cancel(); }
  // CancelWaits(), then waits for the fetches in flight. Later reads that need
  // the origin fail with Cancelled. Idempotent; the destructor calls it.
  void Shutdown();

  // Makes file `ino` fully cached. true: cached (or already was); false: the
  // store refused part of it (policy or no space). Errors: origin errors.
  // In a cluster, the blocks this node does not own are cached by their
  // owners (cluster-wide warm-up): true then means cached there.
  Result<bool> Fetch(uint64_t ino, Priority priority = Priority::kLow) {
    return Fetch(snapshot(), ino, priority);
  }
  Result<bool> Fetch(const SnapshotPtr& snap, uint64_t ino, Priority priority = Priority::kLow);
  // A cached object into the mount's page cache (the fetched hook), block by
  // block from the store, skipping blocks pushed before: what a warm-up does
  // for a file it finds cached, so that a fresh mount over a warm cache is
  // served by the kernel after `granary load` as after a cold load. false
  // when nothing was pushed (no hook, not cached, or the kernel refused).
  bool PushCached(const SnapshotPtr& snap, uint64_t ino);

  // A peer's request for block `block` of `key`: from the store (a complete
  // cache file is handed out as an fd region), else fetched once from the
  // origin (joining any flight) and admitted as owned. Never asks peers.
  Result<ServedBlock> ServePeer(const ObjectKey& key, uint64_t block);
  // A peer's warm-up request: makes the whole object cached here (origin
  // only). true: cached; false: the store refused it.
  Result<bool> WarmForPeer(const ObjectKey& key);
  // A handover's request from the block's new owner: the block only if this
  // node holds it (a cache file's region, or the bytes of a fetch waiting
  // for admission); NotFound otherwise. Never fetches.
  Result<ServedBlock> ServeCached(const ObjectKey& key, uint64_t block);
  // The background half of a handover: makes block `block` of `key`, which
  // this node now owns, cached here from the members that owned it before
  // (ClusterSource::ReadFromPrevious), kept as owned data. true: cached here
  // (or already was); false: no earlier owner holds it (it is read from the
  // origin when someone first asks for it). Never reads the origin.
  Result<bool> PullFromPrevious(const ObjectKey& key, uint64_t block);

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
  UnderStorage& ufs() { return origin_->ufs(); }
  const std::string& dataset() const { return options_.dataset; }
  uint64_t block_size() const { return block_size_; }
  EngineStats stats() const;

  // Called with the bytes of each block fetched for a reader still to come
  // (warm-up, readahead), and of each block a reader got from its owner (a
  // near copy, which the store may refuse), before they are admitted; `offset` is
  // the block's offset in file `ino` of `snap`. Returns true if it handed the
  // bytes to whoever will read them (the FUSE layer puts them into the
  // mount's page cache): the admission then needs no page-cache copy of its
  // own (Store::AdmitBlock's `served`). Set it before the engine serves any
  // read; it runs on fetching and reading threads, concurrently.
  using FetchedHook = std::function<bool(const Snapshot& snap, uint64_t ino, uint64_t offset,
                                         std::string_view bytes)>;
  void SetFetchedHook(FetchedHook hook) { fetched_hook_ = std::move(hook); }

 private:
  struct Flight;
  // A block's identity: the object's IdOf (dataset, key, etag) and the block index.
  struct FlightKey {
    uint64_t hi = 0, lo = 0, block = 0;
    bool operator==(const FlightKey&) const = default;
  };
  struct FlightKeyHash {
    size_t operator()(const FlightKey& k) const { return k.lo ^ (k.block * 0x9E3779B97F4A7C15ull); }
  };
  // Who wants a block, which decides where it may come from and how it is kept.
  struct Want {
    Priority priority = Priority::kHigh;
    bool wait_admission = false;    // also wait for the store's answer
    bool for_peer = false;          // a peer asked: origin only, admitted as owned
    SnapshotPtr snap;               // the reader's snapshot and inode, for the
    uint64_t ino = 0;               // fetched hook (absent for peers)
    CancelToken* cancel = nullptr;  // the reader's; may be null
    bool run_here = false;          // lead a flight on this thread: a warm-up
                                    // over an origin that BoundsRequestTime()
    // The two halves of a reader's fetch of a block another node owns (see
    // GetBlock): the owners only, on the reader's thread; then, when none
    // answered, the origin only, admitted as `origin_kind`.
    bool peer_only = false;
    bool skip_peer = false;
    AdmitKind origin_kind = AdmitKind::kNear;
  };
  struct Got {
    BlockData data;
    bool from_store = false;  // read from the local store, no other source asked
    bool admitted = false;    // with wait_admission: the store holds the block
  };

  static FlightKey FlightKeyOf(const ObjectKey& key, uint64_t block);
  // The bytes of one block: joins or leads a flight.
  Result<Got> GetBlock(const ObjectKey& key, uint64_t block, const Want& want);
  // The fetch of a flight, on a fetch thread (or a warm-up's): asks the sources, publishes
  // the result to the flight's readers, admits the bytes. With want.peer_only
  // and no owner answering, publishes nothing, sets *origin_kind (how the
  // origin's bytes are to be kept) and returns false.
  bool RunFetch(const std::shared_ptr<Flight>& flight, const ObjectKey& key, uint64_t block,
                const Want& want, const FlightKey& fk,
                std::chrono::steady_clock::time_point deadline, AdmitKind* origin_kind = nullptr);
  // Waits for `flight`'s bytes until `deadline` or want.cancel.
  Result<Got> AwaitFlight(const std::shared_ptr<Flight>& flight, const ObjectKey& key,
                          uint64_t block, const Want& want,
                          std::chrono::steady_clock::time_point deadline);
  // Asks the sources in order. *kind: how to admit what came back.
  Result<BlockData> FetchFromSources(const BlockRef& ref, const Want& want, AdmitKind* kind,
                                     bool* from_store,
                                     std::chrono::steady_clock::time_point deadline);
  // `served`: the bytes already went to the reader that asked (see
  // Store::AdmitBlock).
  // `want`: whose fetch this is; a near copy the store refuses goes to
  // want.snap's mount page cache instead (the fetched hook).
  void Admit(const std::shared_ptr<Flight>& f, const ObjectKey& key, uint64_t block,
             const BlockData& data, const FlightKey& fk, bool served, AdmitKind kind,
             const Want& want);
  // Queues the admission of a fetched block; while the admission queue is
  // full (admission_queue_bytes / _blocks) it first waits for room (a near
  // copy is left out instead, and pushed as a refused one is).
  void QueueAdmission(const std::shared_ptr<Flight>& f, const ObjectKey& key, uint64_t block,
                      const BlockData& data, const FlightKey& fk, bool served, AdmitKind kind,
                      const Want& want);
  // A near copy not kept: into the mount's page cache from a fetch thread
  // (never the reader's own: its READ keeps those pages locked until it
  // replies), or each later READ of the block would ask its owner again.
  void PushNotKept(const Want& want, uint64_t block, const BlockData& data, const FlightKey& fk);
  // ServePeer / ServeCached of a block the store holds: its cache file, counted.
  std::optional<ServedBlock> ServeCacheFile(const ObjectKey& key, uint64_t block, uint64_t length);
  // Publishes the admission's outcome and takes the flight out of the map.
  void FinishAdmission(const std::shared_ptr<Flight>& f, const FlightKey& fk, bool admitted);
  Result<bool> FetchKey(const ObjectKey& key, const Want& want);
  // Tells the readahead windows of a read of [offset, end) of `e` and starts
  // the fetches its stream asks for.
  void MaybeReadahead(const SnapshotPtr& snap, const EntryView& e, uint64_t offset, uint64_t end);
  // The hit path of Read and ReadLocal: the bytes from the store (counted,
  // readahead kept going), or nullopt when a block is missing (the store
  // counts that miss only with count_miss).
  std::optional<size_t> ReadHit(const SnapshotPtr& snap, const EntryView& entry,
                                const ObjectKey& key, uint64_t offset, std::span<char> out,
                                bool count_miss);
  // The block at [offset, offset + length) of `key` from the local store, or
  // nullopt when the store does not hold all of it.
  std::optional<BlockData> ReadStoredBlock(const ObjectKey& key, uint64_t offset, uint64_t length,
                                           bool count_miss = true);
  // Fills `out` (the object's bytes from `offset`) from the blocks in flight,
  // waiting for them. false: a block of the range has no fetch in flight, or
  // it failed; the caller reads the store.
  bool ReadFromFlights(const ObjectKey& key, uint64_t offset, std::span<char> out);
  // Starts a low-priority fetch of `block` that nobody waits for, unless the
  // block is in flight already. false: readahead memory is spent (nothing started).
  bool StartReadahead(const SnapshotPtr& snap, uint64_t ino, const ObjectKey& key, uint64_t block);
  // Blocks the fetched hook put into the mount's page cache (a load, or
  // readahead from the origin): readahead does not read them again from the
  // store. Remembered up to kPushedBlocksRemembered, then forgotten at once.
  void NotePushed(const FlightKey& fk);
  bool WasPushed(const FlightKey& fk);
  static constexpr size_t kPushedBlocksRemembered = 1 << 18;
  // Completes a flight that never ran with `status` and takes it out of the map.
  void AbandonFlight(const std::shared_ptr<Flight>& flight, const FlightKey& fk, Status status);
  // (snapshot version, inode) in one number: inodes are < 2^32.
  static uint64_t VersionedIno(const Snapshot& snap, uint64_t ino) {
    return snap.version() << 32 | ino;
  }
  uint64_t BlockCount(uint64_t size) const;
  uint64_t BlockLength(uint64_t size, uint64_t block) const {
    return std::min(block_size_, size - block * block_size_);
  }

  std::atomic<SnapshotPtr> snapshot_;
  Store* store_;
  EngineOptions options_;
  uint64_t block_size_;
  std::unique_ptr<OriginSource> origin_;
  std::shared_ptr<ClusterSource> cluster_;  // null on a single node
  FetchedHook fetched_hook_;

  // Guards flights_ and the check-and-add of readahead_bytes_; taken before
  // a Flight's mu, never while one is held.
  Mutex flights_mu_;
  std::unordered_map<FlightKey, std::shared_ptr<Flight>, FlightKeyHash> flights_
      GUARDED_BY(flights_mu_);
  std::atomic<uint64_t> readahead_bytes_{0};  // bytes of readahead fetches in flight

  // Fetched blocks queued for admission: a leaf lock; admission_cv_ wakes
  // fetches waiting for room.
  Mutex admission_mu_;  // guards admission_pending_blocks_, writes of admission_pending_bytes_
  CondVar admission_cv_;
  std::atomic<uint64_t> admission_pending_bytes_{0};
  int admission_pending_blocks_ GUARDED_BY(admission_mu_) = 0;

  ReadaheadWindows readahead_;  // per file (VersionedIno), the sequential streams
  Mutex pushed_mu_;             // guards pushed_; a leaf lock
  std::unordered_set<FlightKey, FlightKeyHash> pushed_ GUARDED_BY(pushed_mu_);

  struct Counters {
    std::atomic<uint64_t> reads{0}, hit_reads{0}, miss_reads{0}, hit_bytes{0}, miss_bytes{0},
        read_errors{0}, read_waits_ended{0}, flight_joins{0}, admitted{0}, not_admitted{0},
        admit_errors{0}, near_admitted{0}, peer_blocks{0}, peer_bytes{0}, peer_fallbacks{0},
        served_blocks{0}, served_hits{0}, served_bytes{0}, served_errors{0}, admission_waits{0},
        readahead_started{0}, readahead_dropped{0};
  };
  mutable Counters c_;

  CancelToken shutdown_;  // cancelled by Shutdown(): ends permit waits

  // Calls of Read/Fetch/ServePeer/WarmForPeer in progress: the destructor,
  // after cancelling their waits, waits for them to return before any member
  // goes (a reader racing a shutdown must not touch a destroyed engine).
  class CallGuard;
  Mutex calls_mu_;  // guards calls_; a leaf lock
  CondVar calls_cv_;
  int calls_ GUARDED_BY(calls_mu_) = 0;

  // Declared last: destroyed first, so queued admissions finish while the
  // members they use are alive.
  std::unique_ptr<ElasticPool>
      fetchers_;  // flights' fetches, readahead's too (stopped by Shutdown)
  std::unique_ptr<ThreadPool> admission_pool_;
};

}  // namespace granary
