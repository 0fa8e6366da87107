// The `granary` binary: parses the command line and runs one verb (see
// commands.h for the verb table and cli_common.h for exit codes).
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "common/log.h"

int main(int argc, char** argv) {
  using namespace granary::cli;
  CLI::App app{"granary: a dataset cache for deep-learning training", "granary"};
  app.fallthrough();  // global flags may follow the verb; subcommands inherit this
  app.require_subcommand(1);
  CliContext ctx;
  AddGlobalFlags(app, ctx.flags);
  for (RegisterVerbFn reg : AllVerbs()) reg(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (argc == 1) {
      std::cerr << app.help();
    } else {
      std::cerr << "granary: " << e.what() << " (see 'granary --help')" << std::endl;
    }
    return kExitUsage;
  }
  granary::InitLogging();
  if (auto s = granary::SetLogLevel(ctx.flags.log_level); !s.ok()) {
    return ReportError("--log-level", s);
  }
  if (!ctx.action) {
    std::cerr << app.help();
    return kExitUsage;
  }
  return ctx.action();
}
