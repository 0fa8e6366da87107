// NodeIdentity: a cluster node's id, kept in its cache directory, so that a
// node restarted or rescheduled with the same disk is the same member (the
// same rendezvous seed, so the same share of the placement) whatever address
// it comes back at, and a node with a new disk joins as a new member.
//
// File `<dir>/node-id`, one line of text (docs/cluster.md):
//   granary-node-id 1 <id> <checksum>\n
// `1` is the format version, <id> 32 lowercase hex digits (128 random bits),
// <checksum> the XXH3-64 of <id> in 16 lowercase hex digits. Written to a
// temporary name and renamed into place, so it is either absent or whole.
//
// Thread safety: free functions; two processes on one directory are kept
// apart by the daemon's one-per-dataset lock, not here.
#pragma once

#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary::cluster {

inline constexpr std::string_view kNodeIdFile = "node-id";

// The id stored in `dir`/node-id; creates the file with a fresh random id
// when it is absent. A file that fails validation (other version, bad
// checksum, truncated) is replaced by a fresh id with a warning: the node
// then joins as a new member (its cached data is still served as it is
// asked for). IoError/PermissionDenied when the file cannot be read or
// written.
Result<std::string> LoadOrCreateNodeId(const std::string& dir);

// The file's text for `id`; exposed for tests.
std::string EncodeNodeIdFile(std::string_view id);
// Parses the file's text; Corruption naming what is wrong.
Result<std::string> DecodeNodeIdFile(std::string_view text);

}  // namespace granary::cluster
