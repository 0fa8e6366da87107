// StoreStats <-> JSON (see store_stats_json.h).
#include "store/store_stats_json.h"

#include <array>

#include "common/json_fields.h"

namespace granary {
namespace {

// Every counter, once: both directions read this table.
constexpr std::array kCounters = std::to_array<JsonCounter<StoreStats>>({
    {"read_hits", &StoreStats::read_hits},
    {"read_misses", &StoreStats::read_misses},
    {"hit_bytes", &StoreStats::hit_bytes},
    {"miss_bytes", &StoreStats::miss_bytes},
    {"admissions", &StoreStats::admissions},
    {"refusals", &StoreStats::refusals},
    {"no_space", &StoreStats::no_space},
    {"evictions", &StoreStats::evictions},
    {"demotions", &StoreStats::demotions},
    {"checksum_failures", &StoreStats::checksum_failures},
    {"recovered_objects", &StoreStats::recovered_objects},
    {"recovery_dropped", &StoreStats::recovery_dropped},
    {"orphans_removed", &StoreStats::orphans_removed},
    {"near_refused", &StoreStats::near_refused},
    {"near_evictions", &StoreStats::near_evictions},
    {"complete_objects", &StoreStats::complete_objects},
    {"complete_bytes", &StoreStats::complete_bytes},
    {"owned_complete_objects", &StoreStats::owned_complete_objects},
    {"owned_complete_bytes", &StoreStats::owned_complete_bytes},
    {"owned_block_bytes", &StoreStats::owned_block_bytes},
});

Result<TierStats> TierFromJson(const nlohmann::json& j, size_t index) {
  TierStats t;
  JsonFields in(j, "store stats: tiers[" + std::to_string(index) + "]");
  std::string medium = std::string(MediumName(t.medium));
  in.Get("medium", medium);
  in.Get("path", t.path);
  in.Get("quota", t.quota);
  in.Get("used_bytes", t.used_bytes);
  in.Get("files", t.files);
  if (Result<Medium> m = ParseMedium(medium); m.ok()) {
    t.medium = *m;
  } else {
    in.Fail("medium '" + medium + "' is not MEM, SSD or HDD");
  }
  RETURN_IF_ERROR(in.status());
  return t;
}

}  // namespace

nlohmann::json ToJson(const StoreStats& s) {
  nlohmann::json j = nlohmann::json::object();
  nlohmann::json tiers = nlohmann::json::array();
  for (const TierStats& t : s.tiers) {
    tiers.push_back({{"medium", MediumName(t.medium)},
                     {"path", t.path},
                     {"quota", t.quota},
                     {"used_bytes", t.used_bytes},
                     {"files", t.files}});
  }
  j["tiers"] = std::move(tiers);
  PutCounters(j, s, kCounters);
  return j;
}

Result<StoreStats> StoreStatsFromJson(const nlohmann::json& j) {
  StoreStats s;
  JsonFields in(j, "store stats");
  in.GetCounters(s, kCounters);
  if (const nlohmann::json* tiers = in.Find("tiers")) {
    if (!tiers->is_array()) in.Fail("field 'tiers' is not an array");
    RETURN_IF_ERROR(in.status());
    for (size_t i = 0; i < tiers->size(); ++i) {
      ASSIGN_OR_RETURN(TierStats t, TierFromJson((*tiers)[i], i));
      s.tiers.push_back(std::move(t));
    }
  }
  RETURN_IF_ERROR(in.status());
  return s;
}

}  // namespace granary
