// FuseStats <-> JSON (see fuse_stats_json.h).
#include "fuse/fuse_stats_json.h"

#include <array>

#include "common/json_fields.h"

namespace granary {
namespace {

// Every counter, once: both directions read this table.
constexpr std::array kCounters = std::to_array<JsonCounter<FuseStats>>({
    {"requests", &FuseStats::requests},
    {"requests_resent", &FuseStats::requests_resent},
    {"errors", &FuseStats::errors},
    {"passthrough_opens", &FuseStats::passthrough_opens},
    {"userspace_opens", &FuseStats::userspace_opens},
    {"userspace_reads", &FuseStats::userspace_reads},
    {"userspace_read_bytes", &FuseStats::userspace_read_bytes},
    {"backing_ids_open", &FuseStats::backing_ids_open},
    {"backing_open_failures", &FuseStats::backing_open_failures},
    {"uring_requests", &FuseStats::uring_requests},
    {"dirs_prefetched", &FuseStats::dirs_prefetched},
    {"reads_deferred", &FuseStats::reads_deferred},
    {"reads_waited_inline", &FuseStats::reads_waited_inline},
    {"interrupts", &FuseStats::interrupts},
    {"interrupted_reads", &FuseStats::interrupted_reads},
    {"stores", &FuseStats::stores},
    {"store_bytes", &FuseStats::store_bytes},
    {"files_read", &FuseStats::files_read},
    {"files_read_missed", &FuseStats::files_read_missed},
    {"file_close_overflows", &FuseStats::file_close_overflows},
});

}  // namespace

nlohmann::json ToJson(const FuseStats& s) {
  nlohmann::json j = nlohmann::json::object();
  PutCounters(j, s, kCounters);
  j["requests_by_opcode"] = s.requests_by_opcode;
  j["files_read_counted"] = s.files_read_counted;
  return j;
}

Result<FuseStats> FuseStatsFromJson(const nlohmann::json& j) {
  FuseStats s;
  JsonFields in(j, "fuse stats");
  in.GetCounters(s, kCounters);
  in.Get("requests_by_opcode", s.requests_by_opcode);
  in.Get("files_read_counted", s.files_read_counted);
  RETURN_IF_ERROR(in.status());
  return s;
}

}  // namespace granary
