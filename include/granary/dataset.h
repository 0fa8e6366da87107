// What the native client API (client.h) returns about a dataset and its files.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// A file a load could not fetch, and why.
struct LoadFailure {
  std::string path;
  std::string reason;
};

// The end of a load (Client::Load, `granary load`, a Fluid DataLoad): the
// check made from the cache state when the job ended.
struct LoadResult {
  uint64_t files_requested = 0;
  uint64_t bytes_requested = 0;
  uint64_t files_cached = 0;  // of those, fully cached at the end
  uint64_t bytes_cached = 0;
  uint64_t files_not_fitted = 0;  // not cached: the store refused them (no room / policy)
  uint64_t bytes_not_fitted = 0;
  uint64_t files_failed = 0;               // origin or local errors
  std::vector<LoadFailure> failures;       // the first few
  uint64_t files_not_loaded = 0;           // not attempted (cancelled, or a check only)
  uint64_t missing = 0;                    // list lines naming no file
  std::vector<std::string> missing_paths;  // the first few of them
  bool cancelled = false;
  double elapsed_s = 0;

  // Everything requested is cached and every listed path exists.
  bool complete() const { return files_cached == files_requested && missing == 0; }
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
