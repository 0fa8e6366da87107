// FuseStats <-> JSON (see fuse_stats_json.h).
#include "fuse/fuse_stats_json.h"

#include <array>

#include "common/json_fields.h"

namespace granary {
namespace {

struct Counter {
  const char* name;
  uint64_t FuseStats::*member;
};

// Every counter, once: both directions read this table.
constexpr std::array kCounters = {
    Counter{"requests", &FuseStats::requests},
    Counter{"errors", &FuseStats::errors},
    Counter{"passthrough_opens", &FuseStats::passthrough_opens},
    Counter{"userspace_opens", &FuseStats::userspace_opens},
    Counter{"userspace_reads", &FuseStats::userspace_reads},
    Counter{"userspace_read_bytes", &FuseStats::userspace_read_bytes},
    Counter{"backing_ids_open", &FuseStats::backing_ids_open},
    Counter{"backing_open_failures", &FuseStats::backing_open_failures},
    Counter{"uring_requests", &FuseStats::uring_requests},
    Counter{"dirs_prefetched", &FuseStats::dirs_prefetched},
    Counter{"stores", &FuseStats::stores},
    Counter{"store_bytes", &FuseStats::store_bytes},
};

}  // namespace

nlohmann::json ToJson(const FuseStats& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const Counter& c : kCounters) j[c.name] = s.*c.member;
  j["requests_by_opcode"] = s.requests_by_opcode;
  return j;
}

Result<FuseStats> FuseStatsFromJson(const nlohmann::json& j) {
  FuseStats s;
  JsonFields in(j, "fuse stats");
  for (const Counter& c : kCounters) in.Get(c.name, s.*c.member);
  in.Get("requests_by_opcode", s.requests_by_opcode);
  RETURN_IF_ERROR(in.status());
  return s;
}

}  // namespace granary
