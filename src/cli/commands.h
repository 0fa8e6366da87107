// The table of `granary` verbs. Each verb registers its own subcommand; to add
// one, write cmd_<verb>.cc with a Register<Verb>Command hook, declare it here
// and list it in AllVerbs() (commands.cc).
//
// Thread safety: single-threaded (called from main()).
#pragma once

#include <span>

#include "cli/cli_common.h"

namespace granary::cli {

using RegisterVerbFn = void (*)(CLI::App& app, CliContext& ctx);

void RegisterLsCommand(CLI::App& app, CliContext& ctx);       // cmd_ls.cc
void RegisterCatCommand(CLI::App& app, CliContext& ctx);      // cmd_cat.cc
void RegisterStatCommand(CLI::App& app, CliContext& ctx);     // cmd_stat.cc
void RegisterLoadCommand(CLI::App& app, CliContext& ctx);     // cmd_load.cc
void RegisterStatusCommand(CLI::App& app, CliContext& ctx);   // cmd_status.cc
void RegisterSyncCommand(CLI::App& app, CliContext& ctx);     // cmd_sync.cc
void RegisterVersionCommand(CLI::App& app, CliContext& ctx);  // cmd_version.cc
void RegisterMountCommand(CLI::App& app, CliContext& ctx);    // cmd_mount.cc
void RegisterUmountCommand(CLI::App& app, CliContext& ctx);   // cmd_umount.cc
void RegisterWorkerCommand(CLI::App& app, CliContext& ctx);   // cmd_mount.cc
void RegisterFluidCommand(CLI::App& app, CliContext& ctx);    // cmd_fluid.cc

// Every verb, in the order `granary --help` lists them.
std::span<const RegisterVerbFn> AllVerbs();

}  // namespace granary::cli
