// The run directory's layout: where a mount daemon or a worker keeps its pid
// file, stats file, log and control socket (docs/mount.md, "Run directory").
// Every file of one mount is <run_dir>/mount-<12 hex>.<ext>, named after the
// canonical mount point, or after "@worker-<dataset id>" for a worker, which
// has no mount point.
//
// Thread safety: pure functions (CanonicalMountpoint reads the file system).
#pragma once

#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary {

// The name a worker's run files and control socket use in place of a mount
// point: "@worker-<dataset id>" (RunFilePath takes a name starting with '@'
// as it is, not as a path).
std::string WorkerRunName(std::string_view dataset_id);

// Canonical absolute form of a mount point (realpath when it exists, else as given
// with trailing slashes stripped).
std::string CanonicalMountpoint(std::string_view mountpoint);

// <run_dir>/mount-<12 hex of the canonical mount point>.<ext> (ext: "pid", "stats.json", "log").
std::string RunFilePath(std::string_view run_dir, std::string_view mountpoint,
                        std::string_view ext);

// The control socket of the worker serving `source` on this node (a URI, or
// a Fluid dataset's "fluid://<namespace>/<name>"). InvalidArgument for a
// source ParseUri refuses.
Result<std::string> WorkerSocketPath(std::string_view run_dir, std::string_view source);

}  // namespace granary
