// Store: the tiered local cache of object bytes.
//
// A cached object is one file in one tier directory (MEM/SSD/HDD, fastest
// first), named by a 128-bit hash of (dataset, key, etag) and fanned out into
// 256 subdirectories. Small objects (size <= block_size) are admitted whole:
// written to a temporary name and renamed into place. Large objects are sparse
// files at the object's own offsets, filled block by block, with a presence
// bitmap in the index. A file is "complete" when every block is present; only
// complete files are handed out for FUSE passthrough.
//
// The index (key -> tier, size, checksums, presence, last use) lives in memory
// and is persisted in index_dir as a checkpoint plus an append-only journal
// (docs/format-store.md). A journal record for data is written only after the
// data is in its file, so after kill -9 the index never claims more than what
// survived; checksums (xxh3-64 per object or per block) are verified the first
// time data is served after a restart, and a mismatch drops the object (the
// read reports NotFound so the engine refetches).
//
// Invariants:
//  - A tier's used bytes = sum over its files of the allocated size (each
//    present block / small object rounded up to 4 KiB) plus in-flight
//    reservations of admissions that have not finished yet.
//  - Read, Contains and OpenCompleteFile never return bytes that were not
//    recorded as present, and never return unverified bytes of a recovered file.
//  - Reads never evict. Eviction runs in the background (or RunEvictionOnce)
//    when a tier passes high × quota and stops at low × quota, demoting to the
//    next tier when it has room, else deleting.
//  - complete_objects / complete_bytes (StoreStats) = count and sum of
//    ObjectKey::size over the index entries whose every block is present;
//    owned_complete_* = the same over those of them whose "counted as owned"
//    bit is set (the ownership oracle's answer when the entry became complete
//    or at the last RecountOwnership). Kept per shard and updated under the
//    shard lock at every transition (admission that completes an object,
//    drop, recovery), so they are exact at all times, O(1) per event.
//  - owned_block_bytes (StoreStats) = sum over the present blocks of every
//    index entry, complete or not, of the block's length where the block
//    ownership oracle said this node is the block's primary owner (when the
//    block arrived, at recovery or at the last RecountOwnership). Each entry
//    keeps what it contributed, so a drop subtracts exactly that.
//
// Concurrency model: every public method is thread-safe and may be called
// from any number of threads. The index is a sharded hash map, one mutex per
// shard (guarding the map and the entries in it); file reads and writes happen
// outside the shard locks, except the rename/unlink that publishes or retires
// a file, which is done under its shard lock together with the journal append.
// A file's path is fixed by its object and tier, so a dropped object's path
// can hold a new, partial file of it moments later: whatever opens a cache
// file by path checks afterwards, under the shard lock, that the entry it
// looked up is still current (same entry, same generation) and looks again
// if not; an fd opened that way keeps serving the right bytes however the
// entry changes later. The journal has its own mutex (lock order: shard ->
// journal). Eviction and checkpoints are serialized among themselves and take
// shard locks one at a time. Tier accounting is lock-free (atomics). With
// background work enabled, one thread runs eviction and periodic checkpoints.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "granary/status.h"

namespace granary {

// Identity of one cached object. A different etag is a different object.
struct ObjectKey {
  std::string dataset;  // dataset name (a store may hold several datasets)
  std::string key;      // object key inside the dataset
  std::string etag;     // version token from the origin
  uint64_t size = 0;    // object size in bytes
};

// 128-bit object id: XXH3-128 of (dataset, key, etag). Names the cache file
// and keys the engine's single-flight.
struct ObjectId {
  uint64_t hi = 0, lo = 0;
  bool operator==(const ObjectId&) const = default;
};
struct ObjectIdHash {
  size_t operator()(const ObjectId& id) const { return static_cast<size_t>(id.lo ^ id.hi); }
};
ObjectId IdOf(const ObjectKey& key);

struct StoreOptions {
  // Tier directories, fastest first (MEM, SSD, HDD). At least one; each with a
  // path and a non-zero quota; 0 < low <= high <= 1.
  std::vector<TierLevel> tiers;
  // "lru": admit everything, evict least recently used.
  // "training": stop admitting new objects once usage would pass high × the
  // total quota, instead of evicting (no thrash under random epochs).
  std::string policy = "lru";
  // Objects larger than this are stored as sparse files, block by block.
  // Power of two, 4 KiB .. 1 GiB.
  uint64_t block_size = 4ull << 20;
  // Directory of the index checkpoint and journal. Empty: the first tier's path.
  std::string index_dir;
  // Time source (wall time stamped into checkpoints). Null: Clock::Real().
  Clock* clock = nullptr;
  // Runs eviction and periodic checkpoints on a background thread. Tests turn
  // it off and call RunEvictionOnce()/Checkpoint() themselves.
  bool background = true;
  // How often the background thread checks the watermarks.
  std::chrono::milliseconds eviction_interval{500};
  // The background thread checkpoints after this many journal records.
  uint64_t checkpoint_every_records = 100'000;
  // Index shards (lock striping). Power of two.
  int index_shards = 64;
  // After Read serves bytes, drop the cache file's pages from the kernel page
  // cache (POSIX_FADV_DONTNEED). For a mount whose kernel keeps its own copy of
  // what it read (the no-open `cached` read mode), so a warm data set is held
  // in memory once, not twice. Ranges with no page cached (cachestat(2)) are
  // then read with O_DIRECT, so they never enter the page cache at all.
  bool drop_read_pages = false;
  // With drop_read_pages, a whole object (up to block_size) or a block of a
  // large one whose bytes were already served to the reader that asked for
  // them, or put into the mount's page cache (AdmitBlock's `served`), is
  // written to an SSD/HDD tier with O_DIRECT, bypassing the page cache:
  // the mount keeps its own copy, so nobody reads this file soon, and filling
  // (then writing back) page-cache pages nobody reads costs CPU the origin
  // needs on a shared node. Blocks admitted for later readers (warm-up,
  // readahead, unless pushed into the mount's page cache) stay buffered:
  // they are read back moments later. A file
  // system that refuses O_DIRECT (or its alignment) gets buffered writes
  // from then on.
  bool direct_writes = true;

  // Checks every field once; errors name the field and the value.
  Status Validate() const;
};

// One tier's state.
struct TierStats {
  Medium medium = Medium::kSsd;
  std::string path;
  uint64_t quota = 0;       // bytes
  uint64_t used_bytes = 0;  // allocated bytes (4 KiB rounding), incl. in-flight admissions
  uint64_t files = 0;       // cache files (complete or partial)
};

// Counters since Open (monotonic), plus the current tiers.
struct StoreStats {
  std::vector<TierStats> tiers;    // fastest first
  uint64_t read_hits = 0;          // Read calls served from the store
  uint64_t read_misses = 0;        // Read calls answered NotFound
  uint64_t hit_bytes = 0;          // bytes served
  uint64_t miss_bytes = 0;         // bytes requested by missed reads
  uint64_t admissions = 0;         // objects admitted whole + blocks admitted
  uint64_t refusals = 0;           // admissions the policy refused
  uint64_t no_space = 0;           // admissions skipped: no tier with room, or ENOSPC/EDQUOT
  uint64_t evictions = 0;          // objects deleted by eviction
  uint64_t demotions = 0;          // objects moved to a slower tier
  uint64_t checksum_failures = 0;  // objects dropped because verification failed
  uint64_t recovered_objects = 0;  // index entries that survived the last Open's recovery
  uint64_t recovery_dropped = 0;   // entries dropped at Open (file missing or wrong size)
  uint64_t orphans_removed = 0;    // tmp/unindexed files deleted at Open
  uint64_t near_refused = 0;       // near copies refused: they would have needed eviction
  uint64_t near_evictions = 0;     // evicted objects this node does not own (cluster near copies)
  // Current state, not monotonic: objects whose every block is present now,
  // and the sum of their ObjectKey::size (whole-object admissions and sparse
  // objects whose last block arrived; dropped, evicted or recovered ones
  // leave or enter; a demotion changes nothing).
  uint64_t complete_objects = 0;
  uint64_t complete_bytes = 0;
  // The subset the ownership oracle says this node owns (all of them when no
  // oracle is set), as of completion or the last RecountOwnership.
  uint64_t owned_complete_objects = 0;
  uint64_t owned_complete_bytes = 0;
  // Bytes of the present blocks (of complete and partial objects alike)
  // whose primary owner, by the block ownership oracle, is this node (all of
  // them when no oracle is set), as of each block's admission or the last
  // RecountOwnership. Summed over a cluster's members it counts every cached
  // block once, however objects are split across nodes.
  uint64_t owned_block_bytes = 0;
};

// Why a block is admitted (cluster placement).
enum class AdmitKind {
  kOwned,  // this node is responsible for the object (always so without a cluster)
  kNear,   // a copy of an object another node owns: admitted only while the
           // store is below its watermarks, so it never evicts anything
};

// Whether this node owns an object (cluster placement); eviction takes
// objects it does not own first, and StoreStats::owned_complete_* count the
// complete objects it owns. Must be thread-safe and cheap, and must not call
// into the store: it runs under an index shard lock when an admission
// completes an object.
using OwnershipOracle = std::function<bool(const ObjectKey& key)>;

// Whether this node is the primary owner of block `block` of an object (its
// first placement candidate: with replicas, exactly one node per block says
// true), for StoreStats::owned_block_bytes. Block 0 of a small object is the
// whole object. Same rules as OwnershipOracle: thread-safe, cheap, never calls
// into the store (it runs under an index shard lock when a block is admitted).
using BlockOwnershipOracle = std::function<bool(const ObjectKey& key, uint64_t block)>;

// What the store holds of one object.
struct CachedObjectInfo {
  int tier = 0;                  // index into StoreOptions::tiers
  uint64_t allocated_bytes = 0;  // counted against the tier's quota
  uint64_t blocks_present = 0;   // 1 for a small object
  uint64_t blocks_total = 0;     // 1 for a small object
  bool complete = false;         // every block present
  std::string path;              // the cache file
};

class Store {
 public:
  // Validates `options`, creates the tier directories, loads the index
  // (checkpoint + journal), drops entries whose file is missing or has the
  // wrong size, deletes orphan files, and starts background work. An index
  // dir too full (ENOSPC/EDQUOT) for the journal or checkpoint is not an
  // error: a warning is logged, the store serves what it holds and admits
  // nothing (no_space) until a journal can be created.
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);

  // Checkpoints (errors are logged) and stops background work.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Hit path: copies bytes [offset, offset + out.size()) of a cached object
  // into `out` and returns the count (short only at the object's end; 0 when
  // offset >= size and the object is cached). NotFound if the object or a
  // needed block is not cached, or failed verification (first serve after a
  // restart) and was dropped. Updates last use and counters. Never evicts.
  // Bytes of `out` past the returned count may be overwritten (a direct read
  // of the disk lands there rounded up to its alignment). count_miss false:
  // a miss is not counted (the caller's next Read will count it).
  Result<size_t> Read(const ObjectKey& key, uint64_t offset, std::span<char> out,
                      bool count_miss = true);

  // True if the complete object is present.
  bool Contains(const ObjectKey& key) const;
  // True if every block overlapping [offset, offset + len) is present.
  bool ContainsRange(const ObjectKey& key, uint64_t offset, uint64_t len) const;
  // The object's cache state, or NotFound.
  Result<CachedObjectInfo> Describe(const ObjectKey& key) const;

  // Admits a whole object (data.size() must equal key.size; a large object is
  // written block by block). true: cached; false (not an error): the policy
  // refused or there was no space (the engine just serves without caching).
  // Errors: InvalidArgument for a size mismatch, IoError for other I/O failures.
  Result<bool> AdmitObject(const ObjectKey& key, std::string_view data);

  // Admits block `block_index` (covering [i × block_size, min(size, (i+1) ×
  // block_size))) of an object; data must be exactly that range. Same results
  // as AdmitObject. Works for small objects too (block 0 = whole object).
  // `served`: the bytes were just handed to the reader that asked for them
  // (a demand read), so no reader needs them from this file soon (see
  // StoreOptions::direct_writes).
  // `kind`: a kNear block is refused (false, counted in near_refused) when
  // admitting it would take the store past its capacity (sum of high ×
  // quota), so near copies only ever use free space.
  // `xxh3`: the XXH3-64 of `data` when the caller has it already (hashed as
  // the bytes arrived); recorded as the block's checksum instead of hashing
  // `data` again. A wrong one fails the block's verification (its first read
  // after a restart): the block is dropped and fetched again, never served.
  Result<bool> AdmitBlock(const ObjectKey& key, uint64_t block_index, std::string_view data,
                          bool served = false, AdmitKind kind = AdmitKind::kOwned,
                          std::optional<uint64_t> xxh3 = std::nullopt);

  // Installs the ownership test eviction uses: objects for which it answers
  // false (near copies) are evicted before any owned object, each group in
  // the policy's order. Without one every object counts as owned. And the
  // block ownership test behind owned_block_bytes (null: this node owns every
  // block; eviction does not use it). Both are replaced together, so clearing
  // them (nullptr) never calls either. Thread-safe; may be called at any
  // time; once it returns, no eviction pass calls the previous oracle (so its
  // captures may be destroyed). Then recounts (RecountOwnership).
  void SetOwnershipOracle(OwnershipOracle oracle, BlockOwnershipOracle block_oracle = nullptr);

  // Asks the current oracles again about every object in the index and
  // updates owned_complete_* (and each complete entry's "counted as owned"
  // bit) and owned_block_bytes (each entry's present blocks), for when the
  // oracles' answers changed (cluster membership). O(entries + present
  // blocks) oracle calls, made outside the shard locks; admissions and reads
  // go on meanwhile. Recounts are serialized; the last one to start wins.
  // Thread-safe; never call it from an oracle.
  void RecountOwnership();

  // For FUSE passthrough: an O_RDONLY fd of the complete, verified cache file,
  // or NotFound. The caller owns the fd and must close it. The fd stays valid
  // (and its bytes correct) even if the object is evicted or demoted later.
  Result<int> OpenCompleteFile(const ObjectKey& key);
  // One present block of a cached object as it lies in its cache file, for
  // sending it without reading it (a peer's request: sendfile). The block
  // is verified first when it has not been since Open(), like a Read.
  struct BlockFile {
    int fd = -1;            // O_RDONLY; the caller owns and closes it
    uint64_t offset = 0;    // where the block starts in the file
    uint64_t length = 0;    // the block's bytes
    uint64_t checksum = 0;  // XXH3-64 of those bytes, recorded at admission
  };
  // NotFound when the block is not present (or failed its verification).
  // Like OpenCompleteFile's fd, the fd keeps its bytes if the object is
  // evicted or demoted later.
  Result<BlockFile> OpenBlockFile(const ObjectKey& key, uint64_t block);
  // The same check without opening anything: the path of the complete,
  // verified cache file (for a FUSE passthrough OPEN, which needs a file only
  // when it has no backing file for the inode yet), or NotFound. Paths are
  // reused: once the object is dropped, the same path may hold a new, partial
  // file of it, so open the file with OpenCompleteFile(), which checks the
  // entry again after opening, never by this path.
  Result<std::string> CompleteFilePath(const ObjectKey& key);

  // Drops the object (file and index entry). OK whether or not it was cached.
  Status Remove(const ObjectKey& key);

  StoreStats stats() const;
  uint64_t block_size() const;

  // Where a reader in another process (an attached client, docs/api.md) may
  // open a small object's cache file itself, without asking the store. The
  // rule: a regular file at <tier path>/<first two hex digits>/<CacheFileName>
  // of an object of at most block_size bytes, whose size is the object's and
  // whose ctime is at or after trusted_since_ns, holds the object's complete,
  // verified bytes. It holds because a small object's file is only published
  // by renaming a completely written file into place (admission, demotion),
  // a demotion verifies an unverified object before copying it, and a file
  // recovered from an earlier run has its ctime set to the present
  // (futimens) once its checksum is verified; files of an earlier run that
  // were never verified keep an older ctime.
  struct FileLayout {
    std::vector<std::string> tier_paths;  // fastest first
    uint64_t block_size = 0;
    int64_t trusted_since_ns = 0;  // CLOCK_REALTIME once Open held the directories' locks
  };
  FileLayout file_layout() const;

  // One eviction pass over every tier (what the background thread runs).
  void RunEvictionOnce();

  // Writes a checkpoint of the index and truncates the journal. Also done
  // periodically by the background thread and on destruction.
  Status Checkpoint();

  struct Impl;  // defined in store_impl.h

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The cache file name of an object: 32 hex digits of XXH3-128 over
// dataset '\0' key '\0' etag.
std::string CacheFileName(const ObjectKey& key);

}  // namespace granary
