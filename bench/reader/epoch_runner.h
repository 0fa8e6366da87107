// RunEpoch: one training-pattern pass over a file list — a fresh seeded
// shuffle, N threads each taking the next file, reading it whole with
// open/read/close through its own 1 MiB buffer (what a DataLoader worker does),
// optionally decoding + augmenting it — and the numbers of that pass.
//
// Thread safety: RunEpoch starts and joins its own threads; call it from one
// thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "granary/status.h"

namespace granary::bench {

struct ReaderOptions {
  int threads = 16;               // concurrent readers
  uint64_t seed = 1;              // epoch e uses the shuffle seeded by (seed, e)
  bool decode = false;            // decode + RandomResizedCrop 224 + flip + normalize
  double limit_seconds = 0;       // stop taking new files after this long (0 = no limit)
  uint64_t max_files = 0;         // read at most this many files per epoch (0 = all)
  size_t buffer_bytes = 1 << 20;  // read() size per call
};

struct EpochResult {
  int epoch = 0;
  uint64_t files = 0;  // files read completely
  uint64_t bytes = 0;
  uint64_t errors = 0;  // files that failed to open, read or decode
  double seconds = 0;   // wall time of the epoch
  double images_per_s = 0;
  double mb_per_s = 0;  // 10^6 bytes per second
  double p50_us = 0;    // per-file latency: open .. close (+ decode with --decode)
  double p99_us = 0;
  double mean_us = 0;
  double cpu_us_per_file = 0;  // process user+sys CPU over the epoch / files
  std::string first_error;     // "" when errors == 0
};

// Reads `files` once in the order of a shuffle seeded by (options.seed, epoch).
EpochResult RunEpoch(const std::vector<std::string>& files, const ReaderOptions& options,
                     int epoch);

}  // namespace granary::bench
