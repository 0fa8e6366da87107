// Running the built `granary` binary from tests, and checking its error lines.
//
// Thread safety: functions are reentrant.
#pragma once

#include <string>
#include <vector>

#include "subprocess.h"

namespace granary::testing {

// Runs `granary args...` (the binary built by this tree).
ProcessResult RunGranary(const std::vector<std::string>& args);

// Lines of `text` without their newlines.
std::vector<std::string> Lines(const std::string& text);

// True when `err` is exactly one line "granary: <what>: ..." containing `reason`.
bool IsErrorLine(const std::string& err, const std::string& what, const std::string& reason);

}  // namespace granary::testing
