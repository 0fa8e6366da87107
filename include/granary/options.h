// Options of the native client API (client.h). Plain values: nothing from
// Granary's sources leaks into these headers.
//
// Thread safety: values.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace granary {

// Client::Open: run the dataset in this process, over the same cache
// directory format (and lock) as `granary mount`.
struct OpenOptions {
  // Cache directories, fastest first, each "PATH" or "PATH:QUOTA" as
  // `granary mount --cache-dir` takes them ("/data/cache:500G"). Empty =
  // /var/lib/granary/cache.
  std::vector<std::string> cache_dirs;
  // Quota of cache dirs given without one ("100G"; "" = min(100G, 90% of free space)).
  std::string cache_size;
  // Bytes of a memory tier in /dev/shm ("4G"; "" = none).
  std::string mem_cache;
  // Connector options of the source, as in the YAML config's mount options
  // (s3: endpoint, region, addressing, ...). Unknown keys are refused.
  std::map<std::string, std::string> origin_options;
  // Secrets (s3: accessKeyId, secretAccessKey, sessionToken). Never logged.
  std::map<std::string, std::string> origin_secrets;
  // Concurrent origin requests (0 = the default, 64).
  int origin_concurrency = 0;
  // A read waiting for the origin longer than this fails (Unavailable).
  std::chrono::milliseconds origin_timeout{60'000};
  // Store policy: "lru" | "training".
  std::string policy = "lru";
};

// Client::Attach: talk to a daemon on this node over its Unix socket.
struct AttachOptions {
  // Run directory of the daemons' sockets (`granary mount --run-dir`); used
  // when Attach is given a mount point. "" = $GRANARY_RUN_DIR, else /run/granary.
  std::string run_dir;
  // Socket connections kept to the daemon (requests from many threads share
  // them; one per reader thread avoids waiting for one).
  int connections = 16;
  // Cache-file descriptors kept open by this client (least recently used closed first).
  // At most half of the process's file limit, which the client raises to its
  // hard limit (RLIMIT_NOFILE): the rest stays for the program.
  size_t max_open_files = 65536;
  // Opens complete cached files itself (a small file whose cache file the
  // daemon's store marks as verified), resolving paths in the daemon's
  // snapshot mapped read-only, instead of asking the daemon for each file;
  // the daemon is told about those reads in batches. false: the first read
  // of every file asks the daemon (docs/api.md).
  bool direct = true;
};

}  // namespace granary
