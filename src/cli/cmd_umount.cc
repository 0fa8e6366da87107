// `granary umount MOUNTPOINT`: stops the daemon serving MOUNTPOINT (SIGTERM via
// its pid file, then waits for it to exit) or, when the daemon is dead, lazily
// unmounts what is left. Exit 1 with "granary: umount <mp>: <reason>" when
// nothing is mounted there or the daemon does not stop.
#include "cli/commands.h"
#include "daemon/daemon.h"

namespace granary::cli {
namespace {

struct UmountFlags {
  std::string mountpoint;
  std::string run_dir = "/run/granary";
  int timeout_s = 60;
};

}  // namespace

void RegisterUmountCommand(CLI::App& app, CliContext& ctx) {
  auto f = std::make_shared<UmountFlags>();
  CLI::App* cmd = app.add_subcommand("umount", "Unmount a dataset and stop its daemon");
  cmd->add_option("MOUNTPOINT", f->mountpoint, "Where the dataset is mounted")->required();
  cmd->add_option("--run-dir", f->run_dir, "Directory of pid and stats files")
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout_s, "Seconds to wait for the daemon to exit")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  cmd->callback([&ctx, f] {
    ctx.action = [f] {
      Status s = StopDaemon(f->run_dir, f->mountpoint, std::chrono::seconds(f->timeout_s));
      if (!s.ok()) {
        ReportError("umount " + f->mountpoint, s);
        return kExitFailure;
      }
      return kExitOk;
    };
  });
}

}  // namespace granary::cli
