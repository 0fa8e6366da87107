// Helpers shared by snapshot.cc and snapshot_build.cc. Internal to src/meta.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "granary/status.h"
#include "meta/snapshot.h"

namespace granary::snapshot_internal {

// "" stays ""; any other prefix gets a trailing "/" if it lacks one.
std::string NormalizePrefix(std::string_view prefix);

// InvalidArgument naming the field when options are unusable.
Status ValidateOptions(const SnapshotOptions& options);

}  // namespace granary::snapshot_internal
