// Store::Impl: the store's private state, shared by store.cc (read path,
// admission), store_maintenance.cc (eviction, checkpoint) and
// store_recovery.cc (Open). See store.h for the contract and the concurrency
// model.
//
// Lock order: Shard::mu -> Impl::journal_mu. maintenance_mu serializes
// eviction passes and checkpoints and is taken before any shard lock;
// recount_mu serializes RecountOwnership, is taken before any shard lock and
// never together with maintenance_mu.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/block_buffer.h"
#include "common/mutex.h"
#include "common/shared_slot.h"
#include "store/index_format.h"
#include "store/policy.h"
#include "store/store.h"

namespace granary {

std::string HexName(const ObjectId& id);

// A fixed-size array of u64 that keeps one element inline: a small object's
// checksum and bitmaps cost no heap allocation (the index holds millions).
class U64Array {
 public:
  U64Array() = default;
  U64Array(size_t n, uint64_t value) { assign(n, value); }
  explicit U64Array(const std::vector<uint64_t>& v) {
    assign(v.size(), 0);
    std::copy(v.begin(), v.end(), begin());
  }
  U64Array(const U64Array& o) { *this = o; }
  U64Array& operator=(const U64Array& o) {
    if (this != &o) {
      assign(o.size_, 0);
      std::copy(o.begin(), o.end(), begin());
    }
    return *this;
  }
  ~U64Array() { Free(); }

  void assign(size_t n, uint64_t value) {
    Free();
    size_ = n;
    if (n > 1) heap_ = new uint64_t[n];
    std::fill(begin(), end(), value);
  }
  size_t size() const { return size_; }
  uint64_t* begin() { return size_ > 1 ? heap_ : &inline_; }
  uint64_t* end() { return begin() + size_; }
  const uint64_t* begin() const { return size_ > 1 ? heap_ : &inline_; }
  const uint64_t* end() const { return begin() + size_; }
  uint64_t& operator[](size_t i) { return begin()[i]; }
  uint64_t operator[](size_t i) const { return begin()[i]; }
  uint64_t& back() { return begin()[size_ - 1]; }
  std::vector<uint64_t> ToVector() const { return std::vector<uint64_t>(begin(), end()); }

 private:
  void Free() {
    if (size_ > 1) delete[] heap_;
    size_ = 0;
  }
  size_t size_ = 0;
  union {
    uint64_t inline_ = 0;
    uint64_t* heap_;
  };
};

// Allocation unit quota accounting counts in.
inline constexpr uint64_t kAllocUnit = 4096;
inline uint64_t RoundUpAlloc(uint64_t n) { return (n + kAllocUnit - 1) / kAllocUnit * kAllocUnit; }

// O_DIRECT I/O needs the offset, the length and the buffer aligned to the
// device's logical block size; 4 KiB covers every common device.
inline constexpr uint64_t kDirectAlign = 4096;
// A kDirectAlign-aligned buffer of at least n bytes per thread, grown on
// demand and reused (so it is resident); nullptr when out of memory. Valid
// until the thread's next call.
char* DirectBuffer(size_t n);

// One cached object. All fields but last_use are guarded by the mutex of the
// shard holding the entry.
struct Entry {
  ObjectId id;
  ObjectKey key;
  uint32_t tier = 0;
  uint64_t blocks = 1;  // number of blocks (1 for a small object)
  U64Array checksums;   // per block XXH3-64; valid where present
  U64Array present;     // presence bitmap words
  U64Array verified;    // in memory: block checked since Open
  uint64_t present_count = 0;
  uint64_t allocated = 0;                  // bytes counted against the tier (present blocks)
  uint64_t generation = 0;                 // bumped when the file moves to another tier
  bool counted_owned = false;              // complete and counted in the shard's owned_* counts
  uint64_t counted_owned_block_bytes = 0;  // this entry's part of Shard::owned_block_bytes
  std::atomic<uint64_t> last_use{0};       // logical use tick (relaxed atomics)

  bool complete() const { return present_count == blocks; }
  template <typename Words>
  static bool Bit(const Words& bits, uint64_t i) {
    return (bits[i / 64] >> (i % 64)) & 1;
  }
  static void SetBit(U64Array& bits, uint64_t i) { bits[i / 64] |= 1ull << (i % 64); }
};

// The complete entries of one shard (StoreStats::complete_* before summing).
struct CompleteCounts {
  uint64_t objects = 0, bytes = 0;              // entries with complete()
  uint64_t owned_objects = 0, owned_bytes = 0;  // those with counted_owned
};

struct Shard {
  // Guards map, complete and every Entry in map (except Entry::last_use;
  // the Entry fields are not annotated: the analysis cannot name the shard
  // an entry sits in). Taken after maintenance_mu and recount_mu, before
  // journal_mu.
  mutable Mutex mu;
  std::unordered_map<ObjectId, std::shared_ptr<Entry>, ObjectIdHash> map GUARDED_BY(mu);
  // Sum over the complete entries of map: updated with every change of an
  // entry's completeness or counted_owned bit.
  CompleteCounts complete GUARDED_BY(mu);
  // Sum of counted_owned_block_bytes over the entries of map.
  uint64_t owned_block_bytes GUARDED_BY(mu) = 0;
};

// One tier's directory and accounting (lock-free).
struct TierState {
  TierLevel level;
  std::atomic<uint64_t> used{0};      // allocated bytes incl. reservations
  std::atomic<uint64_t> files{0};     // cache files
  std::atomic<uint64_t> pressure{0};  // bytes to free after the disk said ENOSPC
  // Cleared once the tier's file system refused an O_DIRECT open or write.
  std::atomic<bool> direct_ok{true};

  // Adds `bytes` to used if that keeps used <= quota.
  bool Reserve(uint64_t bytes);
  void Release(uint64_t bytes) { used.fetch_sub(bytes, std::memory_order_relaxed); }
};

struct Counters {
  std::atomic<uint64_t> read_hits{0}, read_misses{0}, hit_bytes{0}, miss_bytes{0};
  std::atomic<uint64_t> admissions{0}, refusals{0}, no_space{0}, evictions{0}, demotions{0};
  std::atomic<uint64_t> checksum_failures{0}, recovered_objects{0}, recovery_dropped{0};
  std::atomic<uint64_t> orphans_removed{0};
  std::atomic<uint64_t> near_refused{0}, near_evictions{0};
};

struct Store::Impl {
  ~Impl();
  StoreOptions options;
  std::vector<int> lock_fds;  // flock(LOCK_EX) on <dir>/LOCK of index_dir and every tier
  Status LockDir(const std::string& dir);
  Clock* clock = nullptr;
  // CLOCK_REALTIME once Open held the directories' locks (FileLayout's
  // trusted_since_ns): the kernel's clock of file ctimes, not `clock`'s.
  int64_t opened_realtime_ns = 0;
  std::unique_ptr<CachePolicy> policy;
  std::vector<std::unique_ptr<TierState>> tiers;
  std::vector<Shard> shards;
  std::atomic<uint64_t> use_tick{0};
  mutable Counters counters;
  std::atomic<uint64_t> tmp_seq{0};

  // Guards journal and reopen_generation (lock order: after any shard mutex).
  Mutex journal_mu;
  // Null only after an Open whose index dir was full: AppendJournal creates
  // journal `reopen_generation` once there is space again, and until then
  // refuses (NoSpace), so nothing is admitted.
  std::unique_ptr<store_format::Journal> journal GUARDED_BY(journal_mu);
  uint64_t reopen_generation GUARDED_BY(journal_mu) = 0;

  // Serialize (guard no member): RunEvictionOnce and Checkpoint, and
  // RecountOwnership. Each is taken before any shard lock; never together.
  Mutex maintenance_mu;
  Mutex recount_mu;

  // Store::SetOwnershipOracle's test (null: everything owned).
  SharedSlot<const OwnershipOracle> ownership;
  // Store::SetOwnershipOracle's block test (null: every block owned).
  SharedSlot<const BlockOwnershipOracle> block_ownership;

  Mutex bg_mu;    // guards bg_stop; a leaf lock
  CondVar bg_cv;  // signalled on stop, and to run an eviction pass early
  bool bg_stop GUARDED_BY(bg_mu) = false;
  std::thread bg_thread;

  // --- helpers (store.cc) ---
  Shard& ShardOf(const ObjectId& id) { return shards[id.lo & (shards.size() - 1)]; }
  const Shard& ShardOf(const ObjectId& id) const { return shards[id.lo & (shards.size() - 1)]; }
  std::string FilePath(uint32_t tier, const ObjectId& id) const;
  uint64_t BlockLength(const ObjectKey& key, uint64_t block) const;
  uint64_t BlockCount(uint64_t size) const;
  uint64_t NextTick() { return use_tick.fetch_add(1, std::memory_order_relaxed) + 1; }
  uint64_t UsedAll() const;
  uint64_t Capacity() const;
  // Finds the entry for `key` (identity checked) or null. Caller holds the shard lock.
  std::shared_ptr<Entry> FindLocked(const Shard& shard, const ObjectId& id,
                                    const ObjectKey& key) const REQUIRES(shard.mu);
  // Whether `e` is still the shard's entry for its id, in the tier it had at
  // `generation`. Paths are reused -- a dropped object's path may hold a new,
  // partial file of the same object moments later -- so a file opened by path
  // is the one a lookup found only if this holds after the open. Caller holds
  // the shard lock.
  bool CurrentLocked(const Shard& shard, const std::shared_ptr<Entry>& e, uint64_t generation) const
      REQUIRES(shard.mu);
  // The same, taking the shard lock: for the check right after an open.
  bool StillCurrent(const std::shared_ptr<Entry>& e, uint64_t generation) const;
  store_format::EntryRecord ToRecord(const Entry& e) const;
  // Appends a journal record (takes journal_mu). Caller holds the entry's shard lock.
  Status AppendJournal(store_format::RecordType type, std::string_view payload)
      EXCLUDES(journal_mu);
  // Retires an entry: erases it, journals REMOVE, unlinks the file, releases
  // its bytes, uncounts it. Caller holds the shard lock.
  void DropLocked(Shard& shard, const std::shared_ptr<Entry>& e) REQUIRES(shard.mu);
  // Counts `e`, which just became complete, in shard.complete (asking the
  // ownership oracle). Caller holds the shard lock.
  void CountCompleteLocked(Shard& shard, Entry& e) REQUIRES(shard.mu);
  // Takes a complete `e` out of shard.complete. Caller holds the shard lock.
  void UncountCompleteLocked(Shard& shard, Entry& e) REQUIRES(shard.mu);
  // Sets e's counted_owned bit of a complete `e` to `owned`, adjusting
  // shard.complete. Caller holds the shard lock.
  void SetCountedOwnedLocked(Shard& shard, Entry& e, bool owned) REQUIRES(shard.mu);
  // The current oracle's answer for `key` (true without an oracle).
  bool Owned(const ObjectKey& key) const;
  // Adds block `block` of `e`, just marked present, to owned_block_bytes if
  // the current block oracle says this node is its primary owner. Caller
  // holds the shard lock.
  void CountOwnedBlockLocked(Shard& shard, Entry& e, uint64_t block) REQUIRES(shard.mu);
  // Sets e's contribution to shard.owned_block_bytes to `bytes`. Caller holds
  // the shard lock.
  void SetOwnedBlockBytesLocked(Shard& shard, Entry& e, uint64_t bytes) REQUIRES(shard.mu);
  // Bytes of the blocks marked in `present` (bitmap words of an entry of
  // `key`) that `oracle` gives this node (all of them when null).
  uint64_t OwnedBlockBytes(const ObjectKey& key, const uint64_t* present, uint64_t blocks,
                           const BlockOwnershipOracle* oracle) const;
  // Where VerifyBlocks leaves the one block it checked, so that a read is
  // served from those bytes instead of reading the file again: read straight
  // into `out` when it is set (the reader's whole buffer, when the reader
  // wants exactly that block; a direct read rounded up to the alignment may
  // fill it past the block), with no copy; else moved into `bytes`.
  // `filled`: it did one of the two.
  struct Handover {
    std::span<char> out;
    std::shared_ptr<BlockBuffer> bytes;  // when not read into `out`
    bool filled = false;
  };
  // Checks the unverified blocks among [first, last] against their checksums;
  // drops the entry on mismatch (returns false). With `handover`: when
  // exactly one block needed checking, its verified bytes are handed over
  // (see Handover) and, with drop_read_pages, its pages are dropped.
  bool VerifyBlocks(const std::shared_ptr<Entry>& e, uint64_t first, uint64_t last,
                    Handover* handover = nullptr);
  // The path of `key`'s complete, verified cache file (NotFound otherwise),
  // with the entry and its generation at the check, for CurrentLocked.
  Result<std::string> CompleteFile(const ObjectKey& key, std::shared_ptr<Entry>* entry,
                                   uint64_t* generation);
  // Creates `path` (O_EXCL) on `tier` holding `data`, with O_DIRECT if
  // `direct` and the tier allows it. Returns 0 or the errno.
  int WriteNewFile(int tier, const std::string& path, std::string_view data, bool direct);
  // `xxh3`: as AdmitBlock's.
  Result<bool> AdmitSmall(const ObjectKey& key, const ObjectId& id, std::string_view data,
                          bool served = false, std::optional<uint64_t> xxh3 = std::nullopt);
  // Writes `data` at `offset` of the existing file `path` on `tier`, with
  // O_DIRECT if `direct` and the tier allows it. Returns 0 or the errno.
  int WriteBlock(uint32_t tier, const std::string& path, std::string_view data, uint64_t offset,
                 bool direct);
  // `served`: as AdmitBlock's (with drop_read_pages, the block goes to the
  // disk with O_DIRECT).
  Result<bool> AdmitLargeBlock(const ObjectKey& key, const ObjectId& id, uint64_t block,
                               std::string_view data, bool served,
                               std::optional<uint64_t> xxh3 = std::nullopt);
  // For a new large object: asks the policy, reserves `alloc` in the fastest
  // tier with room, creates the sparse file and inserts an empty entry. Null
  // when not admitted. Caller holds the shard lock.
  Result<std::shared_ptr<Entry>> CreateLargeEntryLocked(Shard& shard, const ObjectKey& key,
                                                        const ObjectId& id, uint64_t alloc)
      REQUIRES(shard.mu);
  // Journals a written block and marks it present (releases `alloc` if the
  // journal refuses). Caller holds the shard lock.
  Result<bool> CommitBlockLocked(const std::shared_ptr<Entry>& e, uint64_t block, uint64_t checksum,
                                 uint64_t alloc);
  // Picks the fastest tier with room for `bytes` and reserves them; -1 if none.
  int ReserveInFastest(uint64_t bytes);
  void NoteNoSpace(uint32_t tier, uint64_t bytes, bool disk_full);

  // --- store_maintenance.cc ---
  void EvictOnce();
  void EvictTier(uint32_t tier, uint64_t target);
  // Moves the entry's file to tier+1 (returns false if it could not).
  bool Demote(const std::shared_ptr<Entry>& e, uint32_t to);
  // Copies the blocks marked in `present` from src into a new sparse file dst
  // (the object's immutable fields only are read). Returns 0 or the errno.
  int CopyPresentBlocks(const Entry& e, const std::vector<uint64_t>& present,
                        const std::string& src, const std::string& dst);
  Status CheckpointLocked();
  void BackgroundLoop();

  // --- store_recovery.cc ---
  Status Recover();
  void ApplyRecord(store_format::RecordType type, std::string_view payload);
  void UpsertEntry(store_format::EntryRecord&& rec);
  void UpsertBlock(const store_format::BlockRecord& rec);
  void ValidateFiles();
  void RemoveOrphans();
};

}  // namespace granary
