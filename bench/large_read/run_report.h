// One pass of readers over a list of files: the work split (each thread takes
// the next whole file), its wall and CPU time, and its JSON report.
//
// Thread safety: RunParallel starts and joins its threads; each thread calls
// the worker it got from make_worker, and only that one.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "large_read/manifest.h"

namespace granary::bench {

// What reading one file gave.
struct FileOutcome {
  std::string path;
  uint64_t bytes = 0;     // bytes read
  double seconds = 0;     // from open (or the first request) to the last byte
  uint64_t requests = 0;  // origin requests made for it (0 for files)
  std::string error;      // "" when every byte was read and the checksum matched
};

struct RunReport {
  std::string mode;  // read | mmap | direct | get | get-ranges
  int threads = 0;
  size_t read_bytes = 0;   // bytes per read call (or receive buffer)
  double seconds = 0;      // wall time of the whole pass
  double cpu_seconds = 0;  // user + system of this process during the pass
  std::vector<FileOutcome> files;
};

// Reads one file; called on the thread that made it, one file at a time.
using FileWorker = std::function<FileOutcome(const ManifestEntry&)>;

// Runs `threads` threads over `entries` (in order, each thread taking the next
// file) with a worker each from make_worker (called on that thread).
RunReport RunParallel(const std::vector<ManifestEntry>& entries, int threads,
                      const std::function<FileWorker()>& make_worker);

// totals (files, bytes, errors, MiB/s, CPU seconds per GiB) and every file.
nlohmann::json ReportJson(const RunReport& r);

// The outcome's error for bytes and checksum that do not match the entry
// ("" when they match).
std::string Verify(const ManifestEntry& e, uint64_t bytes, const StreamChecksum& sum);

}  // namespace granary::bench
