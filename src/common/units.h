// Human-readable sizes and durations, as users write them in flags and YAML.
//
// Sizes: "500G", "1.5TiB", "200MiB", "4M", "64k"; a plain integer is bytes.
// Suffixes K, M, G, T, P with optional "i" and optional "B" (any case) are all
// powers of 1024, as in Alluxio, JuiceFS and Kubernetes' Ki/Mi/Gi.
// Durations: "10ms", "500us", "2s", "1.5m", "2h"; a plain number is seconds.
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "granary/status.h"

namespace granary {

// Bytes in `text`, or InvalidArgument naming the value.
Result<uint64_t> ParseSize(std::string_view text);

// "1.5 GiB", "110.2 KiB", "512 B".
std::string FormatSize(uint64_t bytes);

// Fluid's way of writing a size in a Dataset's status (ReportSummary, `granary
// status`): two decimals and no space, "1.50GiB", "512B".
std::string FluidSize(uint64_t bytes);

// "12.5%" for 0.125.
std::string FormatPercent(double ratio);

// Duration in `text`, or InvalidArgument naming the value.
Result<std::chrono::nanoseconds> ParseDuration(std::string_view text);

// "1.2s", "15ms", "2m03s".
std::string FormatDuration(std::chrono::nanoseconds d);

// The items of a `sep`-separated list ("a,b", "/x:/y"), each without
// surrounding spaces; empty items are dropped.
std::vector<std::string> SplitList(std::string_view text, char sep);

}  // namespace granary
