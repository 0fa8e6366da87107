// `granary status [MOUNTPOINT] [--json] [--format fluid] [-v]`: dataset status
// from the running daemon(s) through the control socket. Without a mount
// point: one row per granary mount on this machine.
#include <cstdio>

#include "cli/commands.h"
#include "daemon/control.h"
#include "daemon/status.h"

namespace granary::cli {
namespace {

struct StatusFlags {
  std::string mountpoint;
  bool json = false;
  std::string format = "table";
  bool verbose = false;
  std::string run_dir = "/run/granary";
};

Result<DatasetStatus> Query(const std::string& run_dir, const std::string& mountpoint) {
  ASSIGN_OR_RETURN(nlohmann::json reply,
                   ControlCall(ControlSocketPath(run_dir, mountpoint),
                               {{"v", kControlProtocolVersion}, {"op", "status"}}));
  return StatusFromJson(reply["status"]);
}

int RunStatus(const StatusFlags& flags) {
  if (flags.format != "table" && flags.format != "fluid" && flags.format != "json") {
    return ReportError(
        "--format", InvalidArgument("expected table, json or fluid, not '" + flags.format + "'"));
  }
  std::vector<std::string> mounts;
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
  cmd->add_option("--run-dir", flags->run_dir, "Run directory of the daemons' control sockets");
  cmd->callback([&ctx, flags] { ctx.action = [flags] { return RunStatus(*flags); }; });
}

}  // namespace granary::cli
