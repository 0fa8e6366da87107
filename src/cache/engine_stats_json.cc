// EngineStats <-> JSON (see engine_stats_json.h).
#include "cache/engine_stats_json.h"

#include <array>

#include "common/json_fields.h"

namespace granary {
namespace {

// Every counter, once: both directions read this table.
constexpr std::array kCounters = std::to_array<JsonCounter<EngineStats>>({
    {"files", &EngineStats::ufs_files},
    {"bytes", &EngineStats::ufs_bytes},
    {"reads", &EngineStats::reads},
    {"hit_reads", &EngineStats::hit_reads},
    {"miss_reads", &EngineStats::miss_reads},
    {"hit_bytes", &EngineStats::hit_bytes},
    {"miss_bytes", &EngineStats::miss_bytes},
    {"read_errors", &EngineStats::read_errors},
    {"read_waits_ended", &EngineStats::read_waits_ended},
    {"origin_requests", &EngineStats::origin_requests},
    {"origin_bytes", &EngineStats::origin_bytes},
    {"origin_errors", &EngineStats::origin_errors},
    {"flight_joins", &EngineStats::flight_joins},
    {"admitted", &EngineStats::admitted},
    {"not_admitted", &EngineStats::not_admitted},
    {"admit_errors", &EngineStats::admit_errors},
    {"admission_waits", &EngineStats::admission_waits},
    {"admission_pending_bytes", &EngineStats::admission_pending_bytes},
    {"readahead_started", &EngineStats::readahead_started},
    {"readahead_dropped", &EngineStats::readahead_dropped},
    {"readahead_pending_bytes", &EngineStats::readahead_pending_bytes},
    {"near_admitted", &EngineStats::near_admitted},
    {"peer_blocks", &EngineStats::peer_blocks},
    {"peer_bytes", &EngineStats::peer_bytes},
    {"peer_fallbacks", &EngineStats::peer_fallbacks},
    {"served_blocks", &EngineStats::served_blocks},
    {"served_hits", &EngineStats::served_hits},
    {"served_bytes", &EngineStats::served_bytes},
    {"served_errors", &EngineStats::served_errors},
});

}  // namespace

nlohmann::json ToJson(const EngineStats& s) {
  nlohmann::json j = nlohmann::json::object();
  PutCounters(j, s, kCounters);
  j["origin_latency_buckets"] = s.origin_latency_buckets;
  j["origin_latency_sum_s"] = s.origin_latency_sum_s;
  j["origin_errors_by_code"] = s.origin_errors_by_code;
  return j;
}

Result<EngineStats> EngineStatsFromJson(const nlohmann::json& j) {
  EngineStats s;
  JsonFields in(j, "engine stats");
  in.GetCounters(s, kCounters);
  in.Get("origin_latency_buckets", s.origin_latency_buckets);
  in.Get("origin_latency_sum_s", s.origin_latency_sum_s);
  in.Get("origin_errors_by_code", s.origin_errors_by_code);
  RETURN_IF_ERROR(in.status());
  return s;
}

}  // namespace granary
