// StoreStats <-> JSON (see store_stats_json.h).
#include "store/store_stats_json.h"

#include <array>

#include "common/json_fields.h"

namespace granary {
namespace {

struct Counter {
  const char* name;
  uint64_t StoreStats::*member;
};

// Every counter, once: both directions read this table.
constexpr std::array kCounters = {
    Counter{"read_hits", &StoreStats::read_hits},
    Counter{"read_misses", &StoreStats::read_misses},
    Counter{"hit_bytes", &StoreStats::hit_bytes},
    Counter{"miss_bytes", &StoreStats::miss_bytes},
    Counter{"admissions", &StoreStats::admissions},
    Counter{"refusals", &StoreStats::refusals},
    Counter{"no_space", &StoreStats::no_space},
    Counter{"evictions", &StoreStats::evictions},
    Counter{"demotions", &StoreStats::demotions},
    Counter{"checksum_failures", &StoreStats::checksum_failures},
    Counter{"recovered_objects", &StoreStats::recovered_objects},
    Counter{"recovery_dropped", &StoreStats::recovery_dropped},
    Counter{"orphans_removed", &StoreStats::orphans_removed},
    Counter{"near_refused", &StoreStats::near_refused},
    Counter{"near_evictions", &StoreStats::near_evictions},
};

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
  for (const Counter& c : kCounters) j[c.name] = s.*c.member;
  return j;
}

Result<StoreStats> StoreStatsFromJson(const nlohmann::json& j) {
  StoreStats s;
  JsonFields in(j, "store stats");
  for (const Counter& c : kCounters) in.Get(c.name, s.*c.member);
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
