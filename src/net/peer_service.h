// What a cache node serves to its peers: the request type and the service
// interface the peer server calls (implemented by the cache engine side).
//
// Invariants: a BlockRequest names one version of one object (etag) and one
// byte range of it; a server answers Stale rather than serve another version.
//
// Thread safety: PeerService implementations are called concurrently from the
// server's worker threads and must be thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/block_buffer.h"
#include "granary/status.h"

namespace granary::net {

// A kGetBlock, kGetCachedBlock or kWarm request.
struct BlockRequest {
  std::string dataset;              // dataset id; must be the serving node's
  std::string key;                  // object key
  std::string etag;                 // version token: the server must answer Stale if it differs
  uint64_t size = 0;                // object size
  uint64_t block = 0;               // block index (kWarm: ignored, whole object)
  uint64_t offset = 0, length = 0;  // byte range of that block inside the object (kWarm: ignored)

  bool operator==(const BlockRequest&) const = default;
};

// What a PeerService returns for a block: either `bytes`, or a region of an
// open file (`fd`, `file_offset`, `length`), sent with sendfile. The frame
// header carries the region's `checksum` when the service knows it (a cache
// file's block, checksummed when it was admitted): then no byte of it passes
// through the server, and the receiver's check covers the disk too. Without
// it the server mmaps the region read-only to checksum it. The server takes
// ownership of `fd` and closes it, on success and on failure alike.
struct BlockPayload {
  std::shared_ptr<const BlockBuffer> bytes;  // used when non-null
  int fd = -1;                               // used when bytes is null
  uint64_t file_offset = 0;                  // start of the region in fd
  uint64_t length = 0;                       // bytes in the region
  std::optional<uint64_t> checksum;          // XXH3-64 of the region, if known
};

class PeerService {
 public:
  virtual ~PeerService() = default;
  // The bytes of r's block. Stale if r.etag is not the current version.
  virtual Result<BlockPayload> GetBlock(const BlockRequest& r) = 0;
  // The bytes of r's block only if this node holds them (cached, or fetched
  // and waiting for admission); NotFound otherwise, and nothing is fetched
  // for the request. Asked by a node that took over the block's ownership.
  virtual Result<BlockPayload> GetCachedBlock(const BlockRequest& r) = 0;
  // Makes the whole object cached here; true = cached (false: refused, e.g. by admission).
  virtual Result<bool> Warm(const BlockRequest& r) = 0;
  // This node's status as JSON text.
  virtual Result<std::string> StatusJson() = 0;
};

}  // namespace granary::net
