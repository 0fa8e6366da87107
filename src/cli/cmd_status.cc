// `granary status [MOUNTPOINT] [--json] [--format fluid] [-v] [--cluster]`:
// dataset status from the running daemon(s) through its socket.
// Without a mount point: one row per granary mount on this machine.
// `--worker SOURCE` asks the worker of that dataset instead of a mount.
// `--cluster`: the cluster's totals and one row per member, as the named
// node sees them (docs/cluster.md).
#include <cstdio>

#include "cli/commands.h"
#include "control/control.h"
#include "control/status.h"
#include "daemon/daemon.h"

namespace granary::cli {
namespace {

struct StatusFlags {
  std::string mountpoint;
  bool json = false;
  std::string format = "table";
  bool verbose = false;
  std::string run_dir = "/run/granary";
  std::string worker;  // SOURCE of a worker to ask instead of a mount
  bool cluster = false;
};

// A member's handover after a membership change: "-" when none is in
// progress, else how far its pass over the snapshot got.
std::string Handover(const nlohmann::json& status) {
  if (!status.contains("cluster") || !status["cluster"].contains("handover")) return "-";
  const nlohmann::json& h = status["cluster"]["handover"];
  if (h.value("previous_sets", uint64_t{0}) == 0) return "-";
  const uint64_t total = h.value("objects_total", uint64_t{0});
  const uint64_t checked = h.value("objects_checked", uint64_t{0});
  return FormatPercent(total ? static_cast<double>(checked) / static_cast<double>(total) : 0.0);
}

// The cluster table: totals, then one row per member.
std::string FormatClusterTable(const nlohmann::json& c) {
  const nlohmann::json& t = c["totals"];
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-22s %-8s %-12s %-12s %-12s %-9s %-9s %s\n", "CLUSTER",
                "MEMBERS", "UFS TOTAL", "CACHED", "CAPACITY", "CACHED%", "HIT RATIO",
                "ORIGIN GETS");
  out += line;
  std::snprintf(
      line, sizeof line, "%-22s %-8s %-12s %-12s %-12s %-9s %-9s %llu\n",
      c.value("self", "").c_str(),
      (std::to_string(t.value("members_up", 0)) + "/" + std::to_string(t.value("members", 0)))
          .c_str(),
      FluidSize(t.value("ufs_total_bytes", uint64_t{0})).c_str(),
      FluidSize(t.value("cached_bytes", uint64_t{0})).c_str(),
      FluidSize(t.value("capacity", uint64_t{0})).c_str(),
      FormatPercent(t.value("cached_ratio", 0.0)).c_str(),
      FormatPercent(t.value("hit_ratio_reads", 0.0)).c_str(),
      static_cast<unsigned long long>(t.value("origin_requests", uint64_t{0})));
  out += line;
  std::snprintf(line, sizeof line, "\n%-22s %-6s %-12s %-12s %-9s %-9s %-11s %s\n", "NODE", "STATE",
                "CACHED", "CAPACITY", "CACHED%", "HIT RATIO", "ORIGIN GETS", "HANDOVER");
  out += line;
  for (const nlohmann::json& m : c["members"]) {
    const std::string node = m.value("address", "") + (m.value("self", false) ? " *" : "");
    auto st = m.value("state", "") == "up" ? StatusFromJson(m["status"])
                                           : Result<DatasetStatus>(NotFound("down"));
    if (!st.ok()) {
      std::snprintf(line, sizeof line, "%-22s %-6s %s\n", node.c_str(), "down",
                    m.value("error", st.status().message()).c_str());
    } else {
      std::snprintf(
          line, sizeof line, "%-22s %-6s %-12s %-12s %-9s %-9s %-11llu %s\n", node.c_str(), "up",
          FluidSize(st->cached_bytes).c_str(), FluidSize(st->capacity).c_str(),
          FormatPercent(st->cached_ratio).c_str(), FormatPercent(st->hit_ratio_reads).c_str(),
          static_cast<unsigned long long>(st->origin_requests), Handover(m["status"]).c_str());
    }
    out += line;
  }
  return out;
}

// The socket of the daemon the flags name (a mount or a worker).
Result<std::string> TargetSocket(const StatusFlags& flags) {
  if (!flags.worker.empty()) return WorkerSocketPath(flags.run_dir, flags.worker);
  if (flags.mountpoint.empty()) {
    return InvalidArgument("--cluster: name a mount point or --worker SOURCE");
  }
  ASSIGN_OR_RETURN(auto loc, FindGranaryMount(flags.mountpoint));
  return DaemonSocketPath(flags.run_dir, loc.mountpoint);
}

int RunClusterStatus(const StatusFlags& flags) {
  auto socket = TargetSocket(flags);
  if (!socket.ok()) return ReportError("status", socket.status());
  auto reply = ControlCall(*socket, {{"v", kControlProtocolVersion}, {"op", "cluster_status"}});
  if (!reply.ok()) return ReportError("status --cluster", reply.status());
  if (flags.json || flags.format == "json") {
    std::printf("%s\n", (*reply)["cluster"].dump(2).c_str());
  } else {
    std::fputs(FormatClusterTable((*reply)["cluster"]).c_str(), stdout);
  }
  return kExitOk;
}

Result<DatasetStatus> Query(const std::string& run_dir, const std::string& mountpoint) {
  ASSIGN_OR_RETURN(nlohmann::json reply,
                   ControlCall(DaemonSocketPath(run_dir, mountpoint),
                               {{"v", kControlProtocolVersion}, {"op", "status"}}));
  return StatusFromJson(reply["status"]);
}

int RunStatus(const StatusFlags& flags) {
  if (flags.format != "table" && flags.format != "fluid" && flags.format != "json") {
    return ReportError(
        "--format", InvalidArgument("expected table, json or fluid, not '" + flags.format + "'"));
  }
  if (flags.cluster) return RunClusterStatus(flags);
  std::vector<std::string> mounts;
  if (!flags.worker.empty()) {
    auto socket = TargetSocket(flags);
    if (!socket.ok()) return ReportError("status", socket.status());
    auto reply = ControlCall(*socket, {{"v", kControlProtocolVersion}, {"op", "status"}});
    if (!reply.ok()) return ReportError("status --worker", reply.status());
    auto st = StatusFromJson((*reply)["status"]);
    if (!st.ok()) return ReportError("status --worker", st.status());
    if (flags.json || flags.format == "json") {
      std::printf("%s\n", StatusToJson(*st).dump(2).c_str());
    } else {
      std::fputs(FormatStatusTable({*st}, flags.verbose).c_str(), stdout);
    }
    return kExitOk;
  }
  if (!flags.mountpoint.empty()) {
    auto loc = FindGranaryMount(flags.mountpoint);
    if (!loc.ok()) return ReportError(flags.mountpoint, loc.status());
    mounts.push_back(loc->mountpoint);
  } else {
    mounts = GranaryMounts();
  }
  std::vector<DatasetStatus> rows;
  int rc = kExitOk;
  for (const std::string& mp : mounts) {
    auto s = Query(flags.run_dir, mp);
    if (!s.ok()) {
      rc = ReportError(mp, s.status());
      continue;
    }
    rows.push_back(std::move(*s));
  }
  if (flags.format == "fluid") {
    if (rows.size() != 1) {
      if (rows.empty())
        return rc == kExitOk ? ReportError("status", NotFound("no granary mount")) : rc;
      return ReportError("--format fluid", InvalidArgument("name one mount point"));
    }
    std::printf("%s\n", FluidSummary(rows[0]).dump().c_str());
  } else if (flags.json || flags.format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows) out.push_back(StatusToJson(r));
    std::printf("%s\n", (flags.mountpoint.empty() ? out
                         : out.empty()            ? nlohmann::json()
                                                  : out[0])
                            .dump(2)
                            .c_str());
  } else {
    std::fputs(FormatStatusTable(rows, flags.verbose).c_str(), stdout);
  }
  return rc;
}

}  // namespace

void RegisterStatusCommand(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand("status", "Show cache status of mounted datasets");
  cmd->add_option("MOUNTPOINT", flags->mountpoint, "A granary mount point (default: every mount)");
  cmd->add_flag("--json", flags->json, "Numbers as JSON (bytes, ratios 0..1, counts)");
  cmd->add_option("--format", flags->format, "table | json | fluid (Fluid CacheRuntime summary)");
  cmd->add_flag("-v,--verbose", flags->verbose, "Add per-tier rows");
  cmd->add_option("--run-dir", flags->run_dir, "Run directory of the daemons' sockets");
  cmd->add_option("--worker", flags->worker,
                  "Ask the worker of this dataset (SOURCE) instead of a mount");
  cmd->add_flag("--cluster", flags->cluster, "Cluster totals and one row per member");
  cmd->callback([&ctx, flags] { ctx.action = [flags] { return RunStatus(*flags); }; });
}

}  // namespace granary::cli
