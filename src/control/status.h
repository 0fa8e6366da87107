// Dataset status (`granary status`): the figures of one mounted dataset, from
// the daemon's counters and its snapshot, never from walking the mount.
//
// Exactness: ufs totals are the snapshot's. Cached files/bytes come from the
// store's complete-object counters (StoreStats::complete_*, kept per event,
// O(1) here), plus the snapshot's empty files: CacheEngine::IsCached counts a
// file of size 0 as cached, and the engine never admits one to the store, so
// they are listed once per snapshot version (memoized) and added. These equal
// what asking IsCached about every file gives (ScanCachedFiles), as long as
// the store holds only objects of the current snapshot -- so after a complete
// load CACHED == UFS TOTAL and CACHED% is exactly 100. The store can also
// hold objects the snapshot no longer lists (a sync removes its stale ones
// right after switching; a crash in between, or an admission of an old
// version finishing after it, leaves some until they are evicted): when the
// counters then exceed the snapshot's totals, the call falls back to
// ScanCachedFiles (O(files), about a second per million files), so CACHED
// never exceeds UFS TOTAL; below the totals such objects are counted.
// Owned figures: the store's owned counters (its ownership oracle: a large
// object is owned when this node owns any of its blocks) plus the empty files
// the cluster says this node owns (block 0; one Owns call per empty file).
//
// Phase: "Loading" while a load runs, "Degraded" for kDegradedWindow after
// the origin error counter was seen to grow, else "Ready".
//
// Formats: a table (NAME, UFS TOTAL, CACHED, CAPACITY, CACHED%, HIT RATIO,
// FILES, PHASE; verbose adds a row per tier), JSON with numbers (bytes, ratios
// 0..1, counts), and Fluid's CacheRuntime ReportSummary (string values).
// docs/load-status.md documents the fields.
//
// Thread safety: StatusReporter::Compute may be called from any thread
// (mu_ guards the degraded-phase bookkeeping, empty_mu_ the memoized empty
// files); the free functions are pure (ScanCachedFiles only reads the engine).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/engine.h"
#include "common/mutex.h"
#include "common/units.h"  // FluidSize, FormatPercent: the sizes and ratios of a status
#include "control/loader.h"
#include "fuse/fuse_server.h"
#include "granary/status.h"
#include "meta/overlay.h"

namespace granary {

struct TierUsage {
  std::string medium;  // "MEM" | "SSD" | "HDD"
  std::string path;
  uint64_t quota = 0;       // bytes
  uint64_t used_bytes = 0;  // allocated bytes
  uint64_t files = 0;
};

struct DatasetStatus {
  std::string name;        // source URI
  std::string mountpoint;  // "" when not mounted (tests)
  uint64_t ufs_total_bytes = 0;
  uint64_t ufs_files = 0;
  uint64_t snapshot_version = 0;  // bumped by each `granary sync`
  uint64_t cached_bytes = 0;      // sizes of completely cached files
  // Of those, the files this node owns in its cluster (all of them on a single
  // node): summed over the members, the cluster's cache without near copies.
  uint64_t owned_cached_bytes = 0;
  uint64_t owned_cached_files = 0;
  // Bytes of the cached blocks, of complete and partial files alike, whose
  // primary owner is this node (StoreStats::owned_block_bytes; every cached
  // block on a single node). Summed over the members: the cluster's cache,
  // each block counted once, also for files split block by block across
  // nodes, which no member holds completely.
  uint64_t owned_block_bytes = 0;
  uint64_t cached_files = 0;
  uint64_t capacity = 0;    // sum of tier quotas
  double cached_ratio = 0;  // cached_bytes / ufs_total_bytes (1 for an empty dataset)
  uint64_t reads = 0;       // userspace reads served by the engine
  uint64_t hit_reads = 0;
  uint64_t hit_bytes = 0;
  uint64_t miss_bytes = 0;
  // hit_count() / read_count() (0 without reads). Shown as HIT RATIO and
  // Fluid's cacheHitRatio.
  double hit_ratio_reads = 0;
  double hit_ratio_bytes = 0;  // hit_bytes / (hit_bytes + miss_bytes), userspace reads only
  uint64_t origin_requests = 0;
  uint64_t origin_bytes = 0;
  uint64_t origin_errors = 0;
  uint64_t passthrough_opens = 0;  // opens served by the kernel from the cache file
  uint64_t userspace_opens = 0;
  uint64_t page_cache_stores = 0;  // ranges a load put into the mount's page cache
  // Files readers closed after reading, as the kernel reports them, reads
  // the mount's page cache served included (cached read-only mode, where
  // the daemon may use fanotify: files_read_counted), and of those the ones
  // read partly from beyond the cache (the origin or a peer).
  bool files_read_counted = false;
  uint64_t files_read = 0;
  uint64_t files_read_missed = 0;
  // What HIT RATIO divides. Once files_read_counted has counted a file:
  // files read wholly from the cache / files read. Until then: (hit_reads + passthrough_opens +
  // page_cache_stores) / (reads + the same two), since a passthrough open is
  // served wholly from the cache file by the kernel and a file a load put
  // into the mount's page cache is read from there, each one hit; page-cache
  // re-reads in cached mode are then not seen.
  uint64_t hit_count() const;
  uint64_t read_count() const;
  // Blocks this node served to its cluster's peers, and of those the ones
  // straight from its cache: the cluster's hit ratio counts them (a worker
  // has no reads of its own).
  uint64_t peer_served_blocks = 0;
  uint64_t peer_served_hits = 0;
  // "cached" | "passthrough" | "" (no mount). In cached mode the kernel serves
  // every re-read from the mount's page cache without asking the daemon;
  // files_read counts them.
  std::string read_mode;
  std::string phase = "Ready";  // Loading | Ready | Degraded
  std::vector<TierUsage> tiers;
  std::optional<LoadProgress> load;    // the running (or last) load
  std::optional<OverlayStats> writes;  // a writable mount's uploads (docs/semantics.md)
};

// Cached figures of one snapshot (DatasetStatus's fields of the same names).
struct CachedFigures {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t owned_files = 0;  // of those, owned by this node (Owns block 0; all without a cluster)
  uint64_t owned_bytes = 0;
};

// The figures by asking the engine about every file of `snap` (IsCached: one
// index lookup each, plus one Owns call each in a cluster): O(files). The
// reference StatusReporter's counters agree with; Compute's fallback.
CachedFigures ScanCachedFiles(const CacheEngine& engine, const Snapshot& snap);

// Computes DatasetStatus for one engine.
class StatusReporter {
 public:
  static constexpr std::chrono::seconds kDegradedWindow{60};

  // Borrows engine and loads (may be null); fuse_stats may be empty (no mount).
  // read_mode: the mount's ("cached" | "passthrough"; "" without a mount).
  StatusReporter(CacheEngine* engine, const LoadManager* loads, std::string mountpoint,
                 std::function<FuseStats()> fuse_stats = {}, std::string read_mode = "");

  DatasetStatus Compute();
  // A writable mount's overlay counters (DatasetStatus::writes). Set before use.
  void SetWriteStats(std::function<OverlayStats()> f) { write_stats_ = std::move(f); }

 private:
  // Cached figures from the store's counters and the empty files of `snap`
  // (see Exactness above).
  CachedFigures FromCounters(const std::shared_ptr<const Snapshot>& snap, const StoreStats& ss);

  CacheEngine* engine_;
  const LoadManager* loads_;
  std::string mountpoint_;
  std::function<FuseStats()> fuse_stats_;
  std::string read_mode_;
  std::function<OverlayStats()> write_stats_;
  Mutex mu_;  // guards last_errors_, degraded_until_
  uint64_t last_errors_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point degraded_until_ GUARDED_BY(mu_){};
  Mutex empty_mu_;  // guards empty_of_, empty_keys_ (never held with mu_)
  // The snapshot empty_keys_ were listed from.
  std::weak_ptr<const Snapshot> empty_of_ GUARDED_BY(empty_mu_);
  std::vector<ObjectKey> empty_keys_ GUARDED_BY(empty_mu_);  // its files of size 0
};

nlohmann::json StatusToJson(const DatasetStatus& s);
// The inverse of StatusToJson (the CLI receives JSON from the daemon).
// InvalidArgument naming the field when one is missing or of the wrong type.
Result<DatasetStatus> StatusFromJson(const nlohmann::json& j);

// Fluid CacheRuntime ReportSummary: {"cached": "1.20GiB", "cachedPercentage":
// "100.0%", "cacheCapacity": ..., "cacheHitRatio": "97.3%", "fileNum": "1281167",
// "ufsTotal": ...}.
nlohmann::json FluidSummary(const DatasetStatus& s);

// The status table; `verbose` adds one indented row per tier. When a row's
// mount is in cached read mode, a note under the table says what its HIT
// RATIO cannot see.
std::string FormatStatusTable(const std::vector<DatasetStatus>& rows, bool verbose);

}  // namespace granary
