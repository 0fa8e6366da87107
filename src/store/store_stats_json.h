// JSON codec of StoreStats: the one rendering of the store's counters and
// tiers as JSON (the daemon's stats file, docs/mount.md).
//
// Field names are the struct's; "tiers" is an array, fastest first, of
// {medium ("MEM"|"SSD"|"HDD"), path, quota, used_bytes, files}.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "granary/status.h"
#include "store/store.h"

namespace granary {

// Every field of `s`.
nlohmann::json ToJson(const StoreStats& s);

// The inverse of ToJson. A missing field stays 0 (files written by older
// versions lack newer counters); InvalidArgument names a field of the wrong
// type or an unknown medium.
Result<StoreStats> StoreStatsFromJson(const nlohmann::json& j);

}  // namespace granary
