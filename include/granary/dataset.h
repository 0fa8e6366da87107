// What the native client API (client.h) returns about a dataset and its files.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>

namespace granary {

// One entry of the dataset's snapshot.
struct FileInfo {
  std::string path;  // relative to the dataset root, "/"-separated, no leading "/"
  bool is_dir = false;
  uint64_t size = 0;     // files: bytes; dirs: 0
  int64_t mtime_ns = 0;  // files: the origin object's mtime; dirs: 0
};

// Client::Info.
struct DatasetInfo {
  std::string source;  // the origin URI
  uint64_t files = 0;  // files in the snapshot served now
  uint64_t bytes = 0;  // their bytes
  uint64_t snapshot_version = 0;
  bool attached = false;  // true: served by a daemon; false: in this process
};

// Client::Load.
struct LoadSummary {
  uint64_t files_requested = 0;
  uint64_t bytes_requested = 0;
  uint64_t files_cached = 0;  // of those, fully cached at the end
  uint64_t bytes_cached = 0;
  uint64_t files_failed = 0;
  uint64_t files_not_fitted = 0;  // the cache refused them (no room)
  uint64_t missing = 0;           // listed paths naming nothing
  double elapsed_s = 0;
};

// Client::Prefetch: how far the engine got with the order it was handed.
struct PrefetchProgress {
  uint64_t queued = 0;   // paths handed over (all calls)
  uint64_t fetched = 0;  // fetched into the cache by the prefetcher
  uint64_t skipped = 0;  // already cached when reached
  uint64_t failed = 0;
  uint64_t position = 0;  // the consumers' position in the current order
};

}  // namespace granary
