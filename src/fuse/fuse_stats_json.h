// JSON codec of FuseStats: the one rendering of the FUSE server's counters as
// JSON (the "fuse" object of the daemon's stats file, docs/mount.md).
//
// Field names are the struct's; requests_by_opcode is an array of 64 counts
// indexed by FUSE opcode. The session (transport, passthrough granted, ...)
// is not part of FuseStats; the stats file adds it next to these fields.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "fuse/fuse_server.h"
#include "granary/status.h"

namespace granary {

// Every field of `s`.
nlohmann::json ToJson(const FuseStats& s);

// The inverse of ToJson; fields it does not know (the session's) are
// ignored. A missing field stays 0; InvalidArgument names a field of the
// wrong type or length.
Result<FuseStats> FuseStatsFromJson(const nlohmann::json& j);

}  // namespace granary
