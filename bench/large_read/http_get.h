// Objects read straight from an S3-compatible endpoint (path-style URLs,
// SigV4-signed with UNSIGNED-PAYLOAD when a key is given), no cache and no
// FUSE: the origin's own ceiling for a client. Either one GET streams a whole
// object, checksummed as it arrives, or ranged GETs of range_bytes run
// `parallel` at a time per object, each into a buffer of its own, and are
// checksummed in order (as `granary cat` reads).
//
// Thread safety: a worker belongs to one thread; its connections (one per
// slot) are reused from object to object. curl_global_init must have run.
#pragma once

#include <cstdint>
#include <string>

#include "large_read/run_report.h"

namespace granary::bench {

struct GetOptions {
  std::string endpoint;  // http://host:port
  std::string bucket;
  std::string prefix;      // key = prefix + entry path
  std::string access_key;  // "" = unsigned requests
  std::string secret_key;
  std::string region = "us-east-1";
  size_t buffer_bytes = 256 << 10;  // libcurl's receive buffer (one write callback's bytes at most)
  uint64_t range_bytes = 0;         // 0 = one GET per object
  int parallel = 8;                 // ranged GETs in flight per object
};

// "" when the options can be used, else why not.
std::string ValidateGet(const GetOptions& o);

// A FileWorker for RunParallel (the options are copied).
FileWorker MakeObjectGetter(const GetOptions& o);

}  // namespace granary::bench
