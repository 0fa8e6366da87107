// JSON codec of EngineStats: the one rendering of the engine's counters as
// JSON (the daemon's stats file, docs/mount.md; tools that read it back).
//
// Field names are the struct's, except ufs_files and ufs_bytes, which are
// "files" and "bytes" (the stats file's names since its first version).
// Histograms are arrays of per-bucket counts (origin_latency_buckets: one per
// bound of kOriginLatencyBounds, then +Inf; not cumulative) plus a sum;
// origin_errors_by_code is an array indexed by Code.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "cache/engine.h"
#include "granary/status.h"

namespace granary {

// Every field of `s`.
nlohmann::json ToJson(const EngineStats& s);

// The inverse of ToJson. A missing field stays 0 (files written by older
// versions lack newer counters); InvalidArgument names a field of the wrong
// type or length.
Result<EngineStats> EngineStatsFromJson(const nlohmann::json& j);

}  // namespace granary
