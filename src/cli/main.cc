// The `granary` binary: parses the command line and runs one verb (see
// commands.h for the verb table and cli_common.h for exit codes).
#include <cstdio>
#include <iostream>
#include <set>
#include <string>

#include "cli/commands.h"
#include "common/log.h"

namespace {

// The first argument that is neither a flag nor a global flag's value: the
// verb the user meant ("" when there is none).
std::string FirstWord(int argc, char** argv) {
  static const std::set<std::string> kTakesValue = {"--endpoint", "--region", "--config",
                                                    "--log-level"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (kTakesValue.count(arg) > 0) {
      ++i;
    } else if (!arg.starts_with("-")) {
      return arg;
    }
  }
  return "";
}

bool IsVerb(const CLI::App& app, const std::string& word) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->check_name(word)) return true;
  }
  return false;
}

}  // namespace

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
    std::string word = FirstWord(argc, argv);
    if (argc == 1) {
      std::cerr << app.help();
    } else if (!word.empty() && !IsVerb(app, word)) {
      std::cerr << "granary: " << word << ": unknown command (see 'granary --help')" << std::endl;
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
