// The verb table (see commands.h).
#include "cli/commands.h"

namespace granary::cli {

std::span<const RegisterVerbFn> AllVerbs() {
  static constexpr RegisterVerbFn kVerbs[] = {
      RegisterLsCommand,     RegisterCatCommand,    RegisterStatCommand,    RegisterMountCommand,
      RegisterUmountCommand, RegisterWorkerCommand, RegisterLoadCommand,    RegisterStatusCommand,
      RegisterSyncCommand,   RegisterFluidCommand,  RegisterVersionCommand,
  };
  return kVerbs;
}

}  // namespace granary::cli
