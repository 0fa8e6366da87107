// The files granary_reader reads: every regular file under a directory, or the
// paths of a PaddleClas list file ("train/<wnid>/<name>.JPEG <label>" lines).
//
// Both come back sorted, so a seeded shuffle gives the same order on any
// machine. Thread safety: free functions.
#pragma once

#include <string>
#include <vector>

#include "granary/status.h"

namespace granary::bench {

// Absolute-or-relative paths of all regular files under `dir`, recursively,
// sorted. NotFound when `dir` does not exist; IoError when a walk fails.
Result<std::vector<std::string>> ListTree(const std::string& dir);

// Paths from a list file: the first field of each non-empty line, joined to
// `root` (default: the list file's directory). InvalidArgument naming the line
// when a line has no path.
Result<std::vector<std::string>> ReadListFile(const std::string& list_path, std::string root);

}  // namespace granary::bench
