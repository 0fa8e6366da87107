// `granary sync MOUNTPOINT [--json]`: asks the mount's daemon to list the
// origin again and switch the mount to the new snapshot version (added,
// removed and changed objects become visible; cache files of removed or
// changed objects are deleted). Talks to the daemon through its control socket.
#include <cstdio>

#include "cli/commands.h"
#include "common/units.h"
#include "control/control.h"

namespace granary::cli {
namespace {

struct SyncFlags {
  std::string mountpoint;
  bool json = false;
  std::string run_dir = "/run/granary";
};

int RunSync(const SyncFlags& flags) {
  auto loc = FindGranaryMount(flags.mountpoint);
  if (!loc.ok()) return ReportError(flags.mountpoint, loc.status());
  auto reply = ControlCall(DaemonSocketPath(flags.run_dir, loc->mountpoint),
                           {{"v", kControlProtocolVersion}, {"op", "sync"}});
  if (!reply.ok()) return ReportError("sync " + loc->mountpoint, reply.status());
  const nlohmann::json& r = (*reply)["sync"];
  if (flags.json) {
    std::printf("%s\n", r.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "%s: snapshot v%llu -> v%llu: %llu files (%s); %llu added, %llu removed, %llu changed; "
      "%llu cache files dropped (%s); %.2f s\n",
      loc->mountpoint.c_str(), r.value("old_version", 0ull), r.value("new_version", 0ull),
      r.value("files", 0ull), FormatSize(r.value("bytes", 0ull)).c_str(), r.value("added", 0ull),
      r.value("removed", 0ull), r.value("changed", 0ull), r.value("cache_files_dropped", 0ull),
      FormatSize(r.value("cache_bytes_dropped", 0ull)).c_str(), r.value("elapsed_s", 0.0));
  return kExitOk;
}

}  // namespace

void RegisterSyncCommand(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<SyncFlags>();
  CLI::App* cmd = app.add_subcommand(
      "sync", "List the origin again and switch a mount to the new snapshot version");
  cmd->add_option("MOUNTPOINT", flags->mountpoint, "A granary mount point")->required();
  cmd->add_flag("--json", flags->json, "What changed, as JSON");
  cmd->add_option("--run-dir", flags->run_dir, "Run directory of the daemon's control socket");
  cmd->callback([&ctx, flags] { ctx.action = [flags] { return RunSync(*flags); }; });
}

}  // namespace granary::cli
