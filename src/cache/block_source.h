// BlockSource: where the bytes of a block come from.
//
// The engine asks its sources in order -- the local store, the owner peer
// (cluster), the origin -- and takes the first answer. A source that has
// nothing to say about a block (it is not cached there, this node owns it,
// every peer failed) answers NotFound and the engine asks the next one; only
// the last source's error fails a read. So a dead cache node never fails a
// read: its blocks come from the origin instead.
//
// Thread safety: implementations are called concurrently from reader,
// warm-up and peer-server threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/block_buffer.h"
#include "common/priority_semaphore.h"
#include "granary/status.h"
#include "store/store.h"

namespace granary {

// One block of one object version.
struct BlockRef {
  const ObjectKey& key;  // dataset, key, etag, size: the object's identity
  uint64_t block = 0;    // block index
  uint64_t offset = 0;   // block × block size
  uint64_t length = 0;   // bytes in this block (the last one may be short)
};

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // Short name for logs and metrics ("peer", "origin").
  virtual std::string_view name() const = 0;
  // Exactly ref.length bytes of the block. NotFound: ask the next source.
  // Stale: the object changed (etag differs). Other errors: this source
  // failed; the engine asks the next one unless this is the last.
  virtual Result<BlockData> ReadBlock(const BlockRef& ref, Priority priority) = 0;
};

// The cluster's part of the read path (implemented over src/cluster and
// src/net; absent on a single node).
class ClusterSource : public BlockSource {
 public:
  // True if this node is one of the block's owners: it fetches the block from
  // the origin itself and keeps it as owned data. False: the block comes from
  // its owner and is kept here only as a near copy (AdmitKind::kNear).
  virtual bool Owns(const ObjectKey& key, uint64_t block) const = 0;
  // True if this node is the block's primary owner: its first placement
  // candidate, so with replicas > 1 exactly one node says true per block (it
  // implies Owns). What the store counts in owned_block_bytes, so that a sum
  // over the members counts each block once.
  virtual bool IsPrimary(const ObjectKey& key, uint64_t block) const = 0;
  // ReadBlock for a block this node does not own, saying who answers when no
  // owner does: *next_in_line is set when this node comes next in placement
  // order after the owners that failed (it takes over a dead owner's share,
  // so what it then reads from the origin is kept as owned data, not as a
  // near copy). NotFound: read the origin.
  virtual Result<BlockData> ReadFromOwner(const BlockRef& ref, Priority priority,
                                          bool* next_in_line) = 0;
  Result<BlockData> ReadBlock(const BlockRef& ref, Priority priority) override {
    bool next_in_line = false;
    return ReadFromOwner(ref, priority, &next_in_line);
  }
  // A block this node owns (or was asked for by a peer) but does not hold,
  // from the members that owned it before the last membership changes (a
  // handover in progress, cluster/placement_history.h), asked only for what
  // they hold: never an origin read on their side. NotFound: none holds it,
  // or no handover is in progress.
  virtual Result<BlockData> ReadFromPrevious(const BlockRef& ref, Priority priority) {
    return NotFound("no handover in progress");
  }
  // Asks the owner of a whole object (one that fits one block) to cache it
  // without sending the bytes here (cluster-wide warm-up). true: cached there.
  // NotFound: no live remote owner (the caller fetches it itself).
  virtual Result<bool> WarmRemote(const ObjectKey& key) = 0;
};

}  // namespace granary
