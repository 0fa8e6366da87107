// EngineStats <-> JSON (see engine_stats_json.h).
#include "cache/engine_stats_json.h"

#include <array>

#include "common/json_fields.h"

namespace granary {
namespace {

struct Counter {
  const char* name;
  uint64_t EngineStats::*member;
};

// Every counter, once: both directions read this table.
constexpr std::array kCounters = {
    Counter{"files", &EngineStats::ufs_files},
    Counter{"bytes", &EngineStats::ufs_bytes},
    Counter{"reads", &EngineStats::reads},
    Counter{"hit_reads", &EngineStats::hit_reads},
    Counter{"miss_reads", &EngineStats::miss_reads},
    Counter{"hit_bytes", &EngineStats::hit_bytes},
    Counter{"miss_bytes", &EngineStats::miss_bytes},
    Counter{"read_errors", &EngineStats::read_errors},
    Counter{"origin_requests", &EngineStats::origin_requests},
    Counter{"origin_bytes", &EngineStats::origin_bytes},
    Counter{"origin_errors", &EngineStats::origin_errors},
    Counter{"flight_joins", &EngineStats::flight_joins},
    Counter{"admitted", &EngineStats::admitted},
    Counter{"not_admitted", &EngineStats::not_admitted},
    Counter{"admit_errors", &EngineStats::admit_errors},
    Counter{"near_admitted", &EngineStats::near_admitted},
    Counter{"peer_blocks", &EngineStats::peer_blocks},
    Counter{"peer_bytes", &EngineStats::peer_bytes},
    Counter{"peer_fallbacks", &EngineStats::peer_fallbacks},
    Counter{"served_blocks", &EngineStats::served_blocks},
    Counter{"served_bytes", &EngineStats::served_bytes},
    Counter{"served_errors", &EngineStats::served_errors},
};

}  // namespace

nlohmann::json ToJson(const EngineStats& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const Counter& c : kCounters) j[c.name] = s.*c.member;
  j["origin_latency_buckets"] = s.origin_latency_buckets;
  j["origin_latency_sum_s"] = s.origin_latency_sum_s;
  j["origin_errors_by_code"] = s.origin_errors_by_code;
  return j;
}

Result<EngineStats> EngineStatsFromJson(const nlohmann::json& j) {
  EngineStats s;
  JsonFields in(j, "engine stats");
  for (const Counter& c : kCounters) in.Get(c.name, s.*c.member);
  in.Get("origin_latency_buckets", s.origin_latency_buckets);
  in.Get("origin_latency_sum_s", s.origin_latency_sum_s);
  in.Get("origin_errors_by_code", s.origin_errors_by_code);
  RETURN_IF_ERROR(in.status());
  return s;
}

}  // namespace granary
