// `granary version`: the version this binary was built from.
#include <cstdio>

#include "cli/commands.h"

namespace granary::cli {

void RegisterVersionCommand(CLI::App& app, CliContext& ctx) {
  CLI::App* cmd = app.add_subcommand("version", "Print the version of granary");
  cmd->callback([&ctx] {
    ctx.action = [] {
      std::printf("granary %s\n", GRANARY_VERSION);
      return kExitOk;
    };
  });
}

}  // namespace granary::cli
