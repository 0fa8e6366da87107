// Parsing of one request of the daemon's control ops (status, load, cancel,
// sync, cluster status, drain; the protocol is in control/server.h and
// docs/load-status.md) into a validated request. Kept apart from the server's
// sockets and threads so that it is unit-tested and fuzzed on its own
// (fuzz/control_request_fuzz.cc).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "control/loader.h"
#include "granary/status.h"

namespace granary {

inline constexpr int kControlProtocolVersion = 1;

// The operations of the control protocol.
enum class ControlOp {
  kStatus,         // the dataset status
  kClusterStatus,  // every cluster member's status and the totals
  kLoad,           // warm the cache (fields in ControlRequest::load)
  kCancel,         // cancel the running load
  kSync,           // re-list the origin and switch to the new snapshot
  kDrain,          // start a graceful leave of the cluster (once), report its progress
};

// One request as the server acts on it.
struct ControlRequest {
  ControlOp op = ControlOp::kStatus;
  // kLoad: path, check_only, the inline "list" lines and threads (clamped to
  // -1..kMaxLoadThreads+1 so a huge value is refused later, not wrapped;
  // ResolveLoadTargets checks the range).
  LoadRequest load;
  // kLoad: a list file whose lines the server appends to load.list_lines
  // ("" = none). Not read here: parsing touches no files.
  std::string list_file;
  // kLoad: reply once the load has started instead of when it ends.
  bool background = false;
  // kLoad (not background): a progress line every interval until it ends.
  bool progress = false;
};

// True for the ops ParseControlRequest knows.
bool IsControlOp(std::string_view op);

// Parses one request (a JSON object, or a line of one). Blank lines are the
// caller's to skip. InvalidArgument, whose message is the text of the error
// reply, when it is not a JSON object, "v" is given and is not
// kControlProtocolVersion, "op" is missing, not a string or unknown, or a
// field of a load has the wrong type.
Result<ControlRequest> ControlRequestFromJson(const nlohmann::json& req);
Result<ControlRequest> ParseControlRequest(std::string_view line);

// Appends the lines of `list_file` (ControlRequest::list_file) to
// request.list_lines. InvalidArgument when it cannot be read or is empty.
Status ReadLoadListFile(const std::string& list_file, LoadRequest& request);

}  // namespace granary
