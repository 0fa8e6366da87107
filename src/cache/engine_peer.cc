// CacheEngine's part in a cluster: serving blocks and warm-ups to peers, and
// pulling a block from the members that owned it before a membership change
// (docs/cluster.md). The read path is in engine.cc.
#include "cache/engine.h"
#include "cache/engine_internal.h"

namespace granary {

Result<ServedBlock> CacheEngine::ServePeer(const ObjectKey& key, uint64_t block) {
  CallGuard guard(this);
  if (key.dataset != options_.dataset) {
    c_.served_errors.fetch_add(1, std::memory_order_relaxed);
    return InvalidArgument("block of dataset " + key.dataset + " asked of a node serving " +
                           options_.dataset);
  }
  if (key.size == 0 || block >= BlockCount(key.size)) {
    c_.served_errors.fetch_add(1, std::memory_order_relaxed);
    return InvalidArgument(key.key + ": block " + std::to_string(block) + " out of range");
  }
  const uint64_t offset = block * block_size_;
  const uint64_t length = BlockLength(key.size, block);
  if (auto served = ServeCacheFile(key, block, length)) return *served;
  auto got = GetBlock(key, block, Want{.priority = Priority::kHigh, .for_peer = true});
  if (!got.ok()) {
    c_.served_errors.fetch_add(1, std::memory_order_relaxed);
    return got.status();
  }
  c_.served_blocks.fetch_add(1, std::memory_order_relaxed);
  if (got->from_store) c_.served_hits.fetch_add(1, std::memory_order_relaxed);
  c_.served_bytes.fetch_add(length, std::memory_order_relaxed);
  return ServedBlock{.bytes = got->data, .file_offset = offset, .length = length};
}

// A cached block goes out of its cache file with the checksum the store
// recorded: the daemon never touches its bytes. nullopt when it is not cached.
std::optional<ServedBlock> CacheEngine::ServeCacheFile(const ObjectKey& key, uint64_t block,
                                                       uint64_t length) {
  auto f = store_->OpenBlockFile(key, block);
  if (!f.ok()) return std::nullopt;
  c_.served_blocks.fetch_add(1, std::memory_order_relaxed);
  c_.served_hits.fetch_add(1, std::memory_order_relaxed);
  c_.served_bytes.fetch_add(length, std::memory_order_relaxed);
  return ServedBlock{
      .fd = f->fd, .file_offset = f->offset, .length = f->length, .checksum = f->checksum};
}

Result<bool> CacheEngine::WarmForPeer(const ObjectKey& key) {
  CallGuard guard(this);
  if (key.dataset != options_.dataset) {
    return InvalidArgument("warm-up of dataset " + key.dataset + " asked of a node serving " +
                           options_.dataset);
  }
  if (key.size == 0 || store_->Contains(key)) return true;
  return FetchKey(key, Want{.priority = Priority::kLow, .wait_admission = true, .for_peer = true});
}

Result<ServedBlock> CacheEngine::ServeCached(const ObjectKey& key, uint64_t block) {
  CallGuard guard(this);
  if (key.dataset != options_.dataset || key.size == 0 || block >= BlockCount(key.size)) {
    c_.served_errors.fetch_add(1, std::memory_order_relaxed);
    return InvalidArgument(key.key + ": block " + std::to_string(block) + " of dataset " +
                           key.dataset + " asked of a node serving " + options_.dataset);
  }
  const uint64_t length = BlockLength(key.size, block);
  if (auto served = ServeCacheFile(key, block, length)) return *served;
  // Fetched, not yet admitted: its flight holds the bytes.
  std::shared_ptr<Flight> flight;
  {
    MutexLock lock(flights_mu_);
    auto it = flights_.find(FlightKeyOf(key, block));
    if (it != flights_.end()) flight = it->second;
  }
  if (flight) {
    MutexLock lock(flight->mu);
    if (flight->data_ready && flight->status.ok() && flight->data &&
        flight->data->size() == length) {
      c_.served_blocks.fetch_add(1, std::memory_order_relaxed);
      c_.served_bytes.fetch_add(length, std::memory_order_relaxed);
      return ServedBlock{
          .bytes = flight->data, .file_offset = block * block_size_, .length = length};
    }
  }
  return NotFound(key.key + " block " + std::to_string(block) + " is not held here");
}

Result<bool> CacheEngine::PullFromPrevious(const ObjectKey& key, uint64_t block) {
  CallGuard guard(this);
  const uint64_t offset = block * block_size_;
  const uint64_t length = BlockLength(key.size, block);
  if (store_->ContainsRange(key, offset, length)) return true;
  if (!cluster_) return false;
  // Not through the single-flight map: a reader joining this request would
  // get its "nobody holds it" instead of the origin's bytes. A reader racing
  // it asks the same earlier owners, so at worst a block crosses twice.
  const BlockRef ref{.key = key, .block = block, .offset = offset, .length = length};
  auto data = cluster_->ReadFromPrevious(ref, Priority::kLow);
  if (!data.ok()) {
    if (data.status().code() == Code::kNotFound) return false;
    return data.status();
  }
  if ((*data)->size() != length) return false;
  auto r = store_->AdmitBlock(key, block, (*data)->view(), /*served=*/true, AdmitKind::kOwned,
                              (*data)->xxh3());
  if (!r.ok()) {
    c_.admit_errors.fetch_add(1, std::memory_order_relaxed);
    return r.status();
  }
  (*r ? c_.admitted : c_.not_admitted).fetch_add(1, std::memory_order_relaxed);
  return *r;
}

}  // namespace granary
