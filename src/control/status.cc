// StatusReporter and the status formats (see status.h).
#include "control/status.h"

#include <algorithm>
#include <cstdio>

#include "common/clock.h"
#include "common/json_fields.h"
#include "control/control.h"

namespace granary {
namespace {

double Ratio(uint64_t num, uint64_t den) { return den == 0 ? 0.0 : static_cast<double>(num) / den; }

}  // namespace

StatusReporter::StatusReporter(CacheEngine* engine, const LoadManager* loads,
                               std::string mountpoint, std::function<FuseStats()> fuse_stats,
                               std::string read_mode)
    : engine_(engine),
      loads_(loads),
      mountpoint_(std::move(mountpoint)),
      fuse_stats_(std::move(fuse_stats)),
      read_mode_(std::move(read_mode)) {}

CachedFigures ScanCachedFiles(const CacheEngine& engine, const Snapshot& snap) {
  CachedFigures c;
  const ClusterSource* cluster = engine.cluster();
  snap.ForEachFile([&](const EntryView& e) {
    if (!engine.IsCached(snap, e.ino)) return;
    ++c.files;
    c.bytes += e.size;
    if (!cluster || cluster->Owns(engine.KeyOf(snap, e), 0)) {
      ++c.owned_files;
      c.owned_bytes += e.size;
    }
  });
  return c;
}

CachedFigures StatusReporter::FromCounters(const std::shared_ptr<const Snapshot>& snap,
                                           const StoreStats& ss) {
  CachedFigures c{.files = ss.complete_objects,
                  .bytes = ss.complete_bytes,
                  .owned_files = ss.owned_complete_objects,
                  .owned_bytes = ss.owned_complete_bytes};
  MutexLock lock(empty_mu_);
  if (empty_of_.lock() != snap) {
    // Once per snapshot version: the store never holds empty files.
    empty_keys_.clear();
    snap->ForEachFile([&](const EntryView& e) REQUIRES(empty_mu_) {
      if (e.size == 0) empty_keys_.push_back(engine_->KeyOf(*snap, e));
    });
    empty_of_ = snap;
  }
  const ClusterSource* cluster = engine_->cluster();
  c.files += empty_keys_.size();
  for (const ObjectKey& key : empty_keys_) c.owned_files += !cluster || cluster->Owns(key, 0);
  return c;
}

DatasetStatus StatusReporter::Compute() {
  const std::shared_ptr<const Snapshot> snap_ptr = engine_->snapshot();
  const Snapshot& snap = *snap_ptr;
  EngineStats es = engine_->stats();
  StoreStats ss = engine_->store().stats();
  DatasetStatus s{.name = snap.source_uri(),
                  .mountpoint = mountpoint_,
                  .ufs_total_bytes = snap.total_bytes(),
                  .ufs_files = snap.file_count(),
                  .snapshot_version = snap.version()};
  CachedFigures cached = FromCounters(snap_ptr, ss);
  if (cached.files > s.ufs_files || cached.bytes > s.ufs_total_bytes) {
    // The store holds objects this snapshot does not list (see status.h).
    cached = ScanCachedFiles(*engine_, snap);
  }
  s.cached_files = cached.files;
  s.cached_bytes = cached.bytes;
  s.owned_cached_files = cached.owned_files;
  s.owned_cached_bytes = cached.owned_bytes;
  s.owned_block_bytes = ss.owned_block_bytes;
  for (const TierStats& t : ss.tiers) {
    s.capacity += t.quota;
    s.tiers.push_back({.medium = std::string(MediumName(t.medium)),
                       .path = t.path,
                       .quota = t.quota,
                       .used_bytes = t.used_bytes,
                       .files = t.files});
  }
  s.cached_ratio = s.ufs_total_bytes == 0 ? (s.cached_files == s.ufs_files ? 1.0 : 0.0)
                                          : Ratio(s.cached_bytes, s.ufs_total_bytes);
  s.reads = es.reads;
  s.hit_reads = es.hit_reads;
  s.hit_bytes = es.hit_bytes;
  s.miss_bytes = es.miss_bytes;
  s.hit_ratio_bytes = Ratio(es.hit_bytes, es.hit_bytes + es.miss_bytes);
  s.origin_requests = es.origin_requests;
  s.origin_bytes = es.origin_bytes;
  s.origin_errors = es.origin_errors;
  s.read_mode = read_mode_;
  if (fuse_stats_) {
    FuseStats fs = fuse_stats_();
    s.passthrough_opens = fs.passthrough_opens;
    s.userspace_opens = fs.userspace_opens;
    s.page_cache_stores = fs.stores;
    s.files_read_counted = fs.files_read_counted;
    s.files_read = fs.files_read;
    s.files_read_missed = fs.files_read_missed;
  }
  s.peer_served_blocks = es.served_blocks;
  s.peer_served_hits = es.served_hits;
  s.hit_ratio_reads = Ratio(s.hit_count(), s.read_count());
  if (write_stats_) s.writes = write_stats_();
  if (loads_ != nullptr) {
    if (auto job = loads_->current()) s.load = job->progress();
  }
  auto now = Clock::Real()->Now();
  bool degraded;
  {
    MutexLock lock(mu_);
    if (es.origin_errors > last_errors_) degraded_until_ = now + kDegradedWindow;
    last_errors_ = es.origin_errors;
    degraded = now < degraded_until_;
  }
  if (s.load && s.load->running) {
    s.phase = "Loading";
  } else if (degraded) {
    s.phase = "Degraded";
  }
  return s;
}

nlohmann::json StatusToJson(const DatasetStatus& s) {
  nlohmann::json tiers = nlohmann::json::array();
  for (const TierUsage& t : s.tiers) {
    tiers.push_back({{"medium", t.medium},
                     {"path", t.path},
                     {"quota", t.quota},
                     {"used_bytes", t.used_bytes},
                     {"files", t.files}});
  }
  nlohmann::json j = {{"name", s.name},
                      {"mountpoint", s.mountpoint},
                      {"ufs_total_bytes", s.ufs_total_bytes},
                      {"ufs_files", s.ufs_files},
                      {"snapshot_version", s.snapshot_version},
                      {"cached_bytes", s.cached_bytes},
                      {"owned_cached_bytes", s.owned_cached_bytes},
                      {"owned_cached_files", s.owned_cached_files},
                      {"owned_block_bytes", s.owned_block_bytes},
                      {"cached_files", s.cached_files},
                      {"capacity", s.capacity},
                      {"cached_ratio", s.cached_ratio},
                      {"reads", s.reads},
                      {"hit_reads", s.hit_reads},
                      {"hit_bytes", s.hit_bytes},
                      {"miss_bytes", s.miss_bytes},
                      {"hit_ratio_reads", s.hit_ratio_reads},
                      {"hit_ratio_bytes", s.hit_ratio_bytes},
                      {"origin_requests", s.origin_requests},
                      {"origin_bytes", s.origin_bytes},
                      {"origin_errors", s.origin_errors},
                      {"passthrough_opens", s.passthrough_opens},
                      {"userspace_opens", s.userspace_opens},
                      {"page_cache_stores", s.page_cache_stores},
                      {"files_read_counted", s.files_read_counted},
                      {"files_read", s.files_read},
                      {"files_read_missed", s.files_read_missed},
                      {"peer_served_blocks", s.peer_served_blocks},
                      {"peer_served_hits", s.peer_served_hits},
                      {"read_mode", s.read_mode},
                      {"phase", s.phase},
                      {"tiers", tiers}};
  j["load"] = s.load ? LoadProgressToJson(*s.load) : nlohmann::json(nullptr);
  if (s.writes) {
    const OverlayStats& w = *s.writes;
    j["writes"] = {{"files", w.files},
                   {"dirs", w.dirs},
                   {"pending_files", w.pending_files},
                   {"pending_bytes", w.pending_bytes},
                   {"unclosed_files", w.unclosed_files},
                   {"staged_bytes", w.staged_bytes},
                   {"uploads", w.uploads},
                   {"upload_failures", w.upload_failures},
                   {"uploaded_bytes", w.uploaded_bytes},
                   {"upload_seconds", w.upload_seconds},
                   {"deletes", w.deletes}};
  }
  return j;
}

namespace {

// The parts of a status object (StatusFromJson).
Result<TierUsage> TierUsageFromJson(const nlohmann::json& j) {
  TierUsage u;
  JsonFields tier(j, "status: tier");
  tier.Require("medium", u.medium);
  tier.Require("path", u.path);
  tier.Require("quota", u.quota);
  tier.Require("used_bytes", u.used_bytes);
  tier.Require("files", u.files);
  RETURN_IF_ERROR(tier.status());
  return u;
}

Result<LoadProgress> LoadProgressFromStatusJson(const nlohmann::json& j) {
  LoadProgress p;
  JsonFields load(j, "status: load");
  load.Require("files_total", p.files_total);
  load.Require("bytes_total", p.bytes_total);
  load.Require("files_done", p.files_done);
  load.Require("bytes_done", p.bytes_done);
  load.Require("running", p.running);
  load.Require("eta_s", p.eta_s);
  load.Require("bytes_per_s", p.bytes_per_s);
  RETURN_IF_ERROR(load.status());
  return p;
}

Result<OverlayStats> OverlayStatsFromJson(const nlohmann::json& j) {
  OverlayStats w;
  JsonFields writes(j, "status: writes");
  writes.Require("files", w.files);
  writes.Require("dirs", w.dirs);
  writes.Require("pending_files", w.pending_files);
  writes.Require("pending_bytes", w.pending_bytes);
  writes.Require("unclosed_files", w.unclosed_files);
  writes.Require("staged_bytes", w.staged_bytes);
  writes.Require("uploads", w.uploads);
  writes.Require("upload_failures", w.upload_failures);
  writes.Require("uploaded_bytes", w.uploaded_bytes);
  writes.Require("upload_seconds", w.upload_seconds);
  writes.Require("deletes", w.deletes);
  RETURN_IF_ERROR(writes.status());
  return w;
}

}  // namespace

Result<DatasetStatus> StatusFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("status: not a JSON object");
  DatasetStatus s;
  JsonFields in(j, "status");
  in.Require("name", s.name);
  in.Require("mountpoint", s.mountpoint);
  in.Require("ufs_total_bytes", s.ufs_total_bytes);
  in.Require("ufs_files", s.ufs_files);
  in.Require("snapshot_version", s.snapshot_version);
  in.Require("cached_bytes", s.cached_bytes);
  in.Require("cached_files", s.cached_files);
  in.Require("owned_cached_bytes", s.owned_cached_bytes);
  in.Require("owned_cached_files", s.owned_cached_files);
  in.Require("owned_block_bytes", s.owned_block_bytes);
  in.Require("capacity", s.capacity);
  in.Require("cached_ratio", s.cached_ratio);
  in.Require("reads", s.reads);
  in.Require("hit_reads", s.hit_reads);
  in.Require("hit_bytes", s.hit_bytes);
  in.Require("miss_bytes", s.miss_bytes);
  in.Require("hit_ratio_reads", s.hit_ratio_reads);
  in.Require("hit_ratio_bytes", s.hit_ratio_bytes);
  in.Require("origin_requests", s.origin_requests);
  in.Require("origin_bytes", s.origin_bytes);
  in.Require("origin_errors", s.origin_errors);
  in.Require("passthrough_opens", s.passthrough_opens);
  in.Require("userspace_opens", s.userspace_opens);
  in.Get("page_cache_stores", s.page_cache_stores);
  in.Get("files_read_counted", s.files_read_counted);
  in.Get("files_read", s.files_read);
  in.Get("files_read_missed", s.files_read_missed);
  // Absent in the status of older members.
  in.Get("peer_served_blocks", s.peer_served_blocks);
  in.Get("peer_served_hits", s.peer_served_hits);
  in.Get("read_mode", s.read_mode);
  in.Require("phase", s.phase);
  RETURN_IF_ERROR(in.status());
  if (auto t = j.find("tiers"); t != j.end() && t->is_array()) {
    for (const auto& tj : *t) {
      ASSIGN_OR_RETURN(TierUsage u, TierUsageFromJson(tj));
      s.tiers.push_back(std::move(u));
    }
  }
  if (auto l = j.find("load"); l != j.end() && l->is_object()) {
    ASSIGN_OR_RETURN(s.load, LoadProgressFromStatusJson(*l));
  }
  if (auto wj = j.find("writes"); wj != j.end() && wj->is_object()) {
    ASSIGN_OR_RETURN(s.writes, OverlayStatsFromJson(*wj));
  }
  return s;
}

uint64_t DatasetStatus::hit_count() const {
  if (files_read_counted && files_read > 0) {
    return files_read - std::min(files_read, files_read_missed);
  }
  return hit_reads + passthrough_opens + page_cache_stores;
}

uint64_t DatasetStatus::read_count() const {
  if (files_read_counted && files_read > 0) return files_read;
  return reads + passthrough_opens + page_cache_stores;
}

nlohmann::json FluidSummary(const DatasetStatus& s) {
  return {
      {"cached", FluidSize(s.cached_bytes)},    {"cachedPercentage", FormatPercent(s.cached_ratio)},
      {"cacheCapacity", FluidSize(s.capacity)}, {"cacheHitRatio", FormatPercent(s.hit_ratio_reads)},
      {"fileNum", std::to_string(s.ufs_files)}, {"ufsTotal", FluidSize(s.ufs_total_bytes)}};
}

std::string FormatStatusTable(const std::vector<DatasetStatus>& rows, bool verbose) {
  std::vector<std::vector<std::string>> cells = {
      {"NAME", "UFS TOTAL", "CACHED", "CAPACITY", "CACHED%", "HIT RATIO", "FILES", "PHASE"}};
  for (const DatasetStatus& s : rows) {
    cells.push_back({s.name, FluidSize(s.ufs_total_bytes), FluidSize(s.cached_bytes),
                     FluidSize(s.capacity), FormatPercent(s.cached_ratio),
                     FormatPercent(s.hit_ratio_reads),
                     std::to_string(s.cached_files) + "/" + std::to_string(s.ufs_files), s.phase});
    if (!verbose) continue;
    for (const TierUsage& t : s.tiers) {
      cells.push_back({"  " + t.medium + " " + t.path, "", FluidSize(t.used_bytes),
                       FluidSize(t.quota), FormatPercent(Ratio(t.used_bytes, t.quota)), "",
                       std::to_string(t.files), ""});
    }
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : cells) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  for (const DatasetStatus& s : rows) {
    if (!s.writes) continue;
    const OverlayStats& w = *s.writes;
    char rate[64] = "";
    if (w.upload_seconds > 0) {
      std::snprintf(rate, sizeof rate, ", %.1f MB/s",
                    static_cast<double>(w.uploaded_bytes) / 1e6 / w.upload_seconds);
    }
    std::string unclosed;
    if (w.unclosed_files > 0) {
      unclosed = ", " + std::to_string(w.unclosed_files) +
                 " never closed before a restart: close them again through the mount or "
                 "remount with --discard-pending";
    }
    out += "writes " + s.name + ": " + std::to_string(w.pending_files) + " files pending upload (" +
           FluidSize(w.pending_bytes) + unclosed + "), " + std::to_string(w.uploads) +
           " uploaded (" + FluidSize(w.uploaded_bytes) + rate + "), " +
           std::to_string(w.upload_failures) + " failed\n";
  }
  if (std::any_of(rows.begin(), rows.end(), [](const DatasetStatus& s) {
        return s.read_mode == "cached" && !s.files_read_counted;
      })) {
    out +=
        "HIT RATIO counts the reads the daemon sees; in cached read mode the kernel serves "
        "re-reads from the mount's page cache without it (the daemon counts those only with "
        "CAP_SYS_ADMIN; docs/load-status.md).\n";
  }
  return out;
}

}  // namespace granary
