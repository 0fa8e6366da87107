// Helpers for the CLI integration tests: run a program with its output
// captured, a self-deleting temporary directory, a free loopback port.
//
// Thread safety: each helper object is used by one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "granary/status.h"
#include "testing/random_bytes.h"
#include "testing/temp_dir.h"

namespace granary::testing {

// A fresh directory under $TMPDIR (or /tmp), removed recursively on destruction.

struct ProcessResult {
  int exit_code = -1;      // the exit status; 128+N when killed by signal N
  bool timed_out = false;  // killed because it ran past the deadline
  std::string out;         // everything written to stdout
  std::string err;         // everything written to stderr
};

// Runs argv (argv[0] is a path) with stdin from /dev/null and stdout/stderr
// captured. A process still running after `deadline` is killed (timed_out).
ProcessResult RunProcess(const std::vector<std::string>& argv,
                         std::chrono::seconds deadline = std::chrono::seconds(60));

// A loopback TCP port that was free a moment ago.
Result<int> FreeLoopbackPort();

// Polls until 127.0.0.1:port accepts connections or `deadline` passes.
Status WaitForPort(int port, std::chrono::seconds deadline);

// The value of the first sample of metric `name` in a Prometheus /metrics
// page (`name{labels} value`), or -1 when there is none.
double MetricSample(const std::string& page, const std::string& name);

}  // namespace granary::testing
