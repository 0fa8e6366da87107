// Store: options, identity, read path and small public methods (see store.h).
#include "store/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "common/mutex.h"
#include "common/page_cache.h"
#include "store/store_impl.h"

namespace granary {

Status StoreOptions::Validate() const {
  if (tiers.empty()) return InvalidArgument("store: at least one tier is required");
  for (size_t i = 0; i < tiers.size(); ++i) {
    const TierLevel& t = tiers[i];
    std::string name = "store tier " + std::to_string(i);
    if (t.path.empty()) return InvalidArgument(name + ": path is empty");
    if (t.quota == 0) return InvalidArgument(name + " (" + t.path + "): quota must be > 0");
    if (!(t.low > 0 && t.low <= t.high && t.high <= 1.0)) {
      return InvalidArgument(name + " (" + t.path + "): need 0 < low <= high <= 1, got low=" +
                             std::to_string(t.low) + " high=" + std::to_string(t.high));
    }
    if (i > 0 && static_cast<int>(t.medium) < static_cast<int>(tiers[i - 1].medium)) {
      return InvalidArgument(name + " (" + t.path + "): tiers must be ordered fastest first (" +
                             std::string(MediumName(t.medium)) + " after " +
                             std::string(MediumName(tiers[i - 1].medium)) + ")");
    }
    for (size_t j = 0; j < i; ++j) {
      if (tiers[j].path == t.path) return InvalidArgument(name + ": path " + t.path + " repeated");
    }
  }
  if (tiers.size() > 255) return InvalidArgument("store: at most 255 tiers");
  if (policy != "lru" && policy != "training") {
    return InvalidArgument("store policy '" + policy + "': expected lru or training");
  }
  if (block_size < 4096 || block_size > (1ull << 30) || (block_size & (block_size - 1)) != 0) {
    return InvalidArgument("store block_size " + std::to_string(block_size) +
                           ": must be a power of two between 4 KiB and 1 GiB");
  }
  if (index_shards < 1 || index_shards > 4096 || (index_shards & (index_shards - 1)) != 0) {
    return InvalidArgument("store index_shards " + std::to_string(index_shards) +
                           ": must be a power of two between 1 and 4096");
  }
  if (eviction_interval.count() <= 0) return InvalidArgument("store eviction_interval must be > 0");
  return Status::Ok();
}

ObjectId IdOf(const ObjectKey& key) {
  std::string buf;
  buf.reserve(key.dataset.size() + key.key.size() + key.etag.size() + 2);
  buf.append(key.dataset).push_back('\0');
  buf.append(key.key).push_back('\0');
  buf.append(key.etag);
  XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return ObjectId{.hi = h.high64, .lo = h.low64};
}

std::string HexName(const ObjectId& id) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(id.hi),
                static_cast<unsigned long long>(id.lo));
  return std::string(buf, 32);
}

std::string CacheFileName(const ObjectKey& key) { return HexName(IdOf(key)); }

bool TierState::Reserve(uint64_t bytes) {
  uint64_t cur = used.load(std::memory_order_relaxed);
  do {
    if (cur + bytes > level.quota) return false;
  } while (!used.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  return true;
}

std::string Store::Impl::FilePath(uint32_t tier, const ObjectId& id) const {
  std::string hex = HexName(id);
  std::string path = tiers[tier]->level.path;
  path.push_back('/');
  path.append(hex, 0, 2);
  path.push_back('/');
  path.append(hex);
  return path;
}

uint64_t Store::Impl::BlockCount(uint64_t size) const {
  uint64_t bs = options.block_size;
  return size <= bs ? 1 : (size + bs - 1) / bs;
}

uint64_t Store::Impl::BlockLength(const ObjectKey& key, uint64_t block) const {
  uint64_t start = block * options.block_size;
  if (start >= key.size) return 0;
  return std::min(options.block_size, key.size - start);
}

uint64_t Store::Impl::UsedAll() const {
  uint64_t sum = 0;
  for (const auto& t : tiers) sum += t->used.load(std::memory_order_relaxed);
  return sum;
}

uint64_t Store::Impl::Capacity() const {
  uint64_t sum = 0;
  for (const auto& t : tiers) sum += static_cast<uint64_t>(t->level.high * t->level.quota);
  return sum;
}

std::shared_ptr<Entry> Store::Impl::FindLocked(const Shard& shard, const ObjectId& id,
                                               const ObjectKey& key) const {
  auto it = shard.map.find(id);
  if (it == shard.map.end()) return nullptr;
  const Entry& e = *it->second;
  if (e.key.size != key.size || e.key.key != key.key || e.key.etag != key.etag ||
      e.key.dataset != key.dataset) {
    return nullptr;
  }
  return it->second;
}

store_format::EntryRecord Store::Impl::ToRecord(const Entry& e) const {
  return store_format::EntryRecord{
      .id_hi = e.id.hi,
      .id_lo = e.id.lo,
      .dataset = e.key.dataset,
      .key = e.key.key,
      .etag = e.key.etag,
      .size = e.key.size,
      .tier = e.tier,
      .last_use = e.last_use.load(std::memory_order_relaxed),
      .checksums = e.checksums.ToVector(),
      .present = e.present.ToVector(),
  };
}

Status Store::Impl::AppendJournal(store_format::RecordType type, std::string_view payload) {
  MutexLock lock(journal_mu);
  if (!journal) {
    // Opened on a full disk. A removal needs no record: recovery drops an
    // entry whose file is gone. Anything else waits until a journal fits.
    if (type == store_format::RecordType::kRemove) return Status::Ok();
    ASSIGN_OR_RETURN(journal, store_format::Journal::Create(options.index_dir, reopen_generation));
  }
  return journal->Append(type, payload);
}

bool Store::Impl::CurrentLocked(const Shard& shard, const std::shared_ptr<Entry>& e,
                                uint64_t generation) const {
  auto it = shard.map.find(e->id);
  return it != shard.map.end() && it->second == e && e->generation == generation;
}

bool Store::Impl::StillCurrent(const std::shared_ptr<Entry>& e, uint64_t generation) const {
  const Shard& shard = ShardOf(e->id);
  MutexLock lock(shard.mu);
  return CurrentLocked(shard, e, generation);
}

void Store::Impl::DropLocked(Shard& shard, const std::shared_ptr<Entry>& e) {
  shard.map.erase(e->id);
  Status s = AppendJournal(store_format::RecordType::kRemove,
                           store_format::EncodeRemove(e->id.hi, e->id.lo));
  if (!s.ok()) {
    // Safe: recovery drops an entry whose file is gone.
    GLOG_WARN("store: journaling the removal of {}: {}", HexName(e->id), s.ToString());
  }
  std::string path = FilePath(e->tier, e->id);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    GLOG_WARN("store: unlink {}: {}", path, std::strerror(errno));
  }
  tiers[e->tier]->Release(e->allocated);
  tiers[e->tier]->files.fetch_sub(1, std::memory_order_relaxed);
  if (e->complete()) UncountCompleteLocked(shard, *e);
  SetOwnedBlockBytesLocked(shard, *e, 0);
}

bool Store::Impl::Owned(const ObjectKey& key) const {
  std::shared_ptr<const OwnershipOracle> oracle = ownership.load();
  return !oracle || !*oracle || (*oracle)(key);
}

void Store::Impl::CountOwnedBlockLocked(Shard& shard, Entry& e, uint64_t block) {
  std::shared_ptr<const BlockOwnershipOracle> oracle = block_ownership.load();
  if (oracle && *oracle && !(*oracle)(e.key, block)) return;
  uint64_t len = BlockLength(e.key, block);
  e.counted_owned_block_bytes += len;
  shard.owned_block_bytes += len;
}

void Store::Impl::SetOwnedBlockBytesLocked(Shard& shard, Entry& e, uint64_t bytes) {
  shard.owned_block_bytes = shard.owned_block_bytes - e.counted_owned_block_bytes + bytes;
  e.counted_owned_block_bytes = bytes;
}

uint64_t Store::Impl::OwnedBlockBytes(const ObjectKey& key, const uint64_t* present,
                                      uint64_t blocks, const BlockOwnershipOracle* oracle) const {
  if (oracle && !*oracle) oracle = nullptr;
  uint64_t bytes = 0;
  for (uint64_t b = 0; b < blocks; ++b) {
    if (Entry::Bit(present, b) && (!oracle || (*oracle)(key, b))) bytes += BlockLength(key, b);
  }
  return bytes;
}

void Store::Impl::CountCompleteLocked(Shard& shard, Entry& e) {
  shard.complete.objects++;
  shard.complete.bytes += e.key.size;
  e.counted_owned = false;
  SetCountedOwnedLocked(shard, e, Owned(e.key));
}

void Store::Impl::UncountCompleteLocked(Shard& shard, Entry& e) {
  SetCountedOwnedLocked(shard, e, false);
  shard.complete.objects--;
  shard.complete.bytes -= e.key.size;
}

void Store::Impl::SetCountedOwnedLocked(Shard& shard, Entry& e, bool owned) {
  if (e.counted_owned == owned) return;
  e.counted_owned = owned;
  if (owned) {
    shard.complete.owned_objects++;
    shard.complete.owned_bytes += e.key.size;
  } else {
    shard.complete.owned_objects--;
    shard.complete.owned_bytes -= e.key.size;
  }
}

namespace {

// How the store opens a cache file to read it: no status flag that F_SETFL
// changes (ReadColdDirect relies on it).
constexpr int kCacheReadFlags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;

// Reads exactly out.size() bytes at `offset`; false on error or short file.
bool PreadFull(int fd, char* out, size_t len, uint64_t offset) {
  while (len > 0) {
    ssize_t n = ::pread(fd, out, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

// Reads [offset, offset + len) of `fd` for a caller that drops the pages
// right after (StoreOptions::drop_read_pages). A range with no page in the
// page cache is read with O_DIRECT into an aligned buffer, so the kernel
// neither allocates pages, reads ahead, nor has to drop them again; a range
// that is (partly) cached -- e.g. written moments ago -- is copied from the
// page cache. The direct read goes straight into `out` when `out` is aligned
// as O_DIRECT needs, `offset` is, and `capacity` (bytes writable at `out`,
// >= len) holds the read rounded up to the alignment -- as a whole small
// file read into a FUSE reply buffer is; otherwise into a per-thread aligned
// buffer and copied. Sets *paged when the page cache was used (the caller
// still has pages to drop). Falls back to a plain read where O_DIRECT is
// refused. `fd` is the caller's own descriptor, opened with kCacheReadFlags:
// none of the status flags F_SETFL changes is set on it, so O_DIRECT is
// switched on and off again without asking for the flags first (one system
// call fewer per cold read).
bool ReadColdDirect(int fd, char* out, size_t len, size_t capacity, uint64_t offset, bool* paged) {
  *paged = true;
  if (len == 0 || CachedPages(fd, offset, len) != 0) return PreadFull(fd, out, len, offset);
  uint64_t begin = offset / kDirectAlign * kDirectAlign;
  uint64_t end = (offset + len + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  const bool straight = begin == offset && capacity >= end - begin &&
                        reinterpret_cast<uintptr_t>(out) % kDirectAlign == 0;
  char* buf = straight ? out : DirectBuffer(end - begin);
  if (buf == nullptr || ::fcntl(fd, F_SETFL, O_DIRECT) != 0) {
    return PreadFull(fd, out, len, offset);
  }
  uint64_t have = 0;  // bytes of [begin, end) read so far
  bool ok = true;
  while (begin + have < offset + len) {
    ssize_t r = ::pread(fd, buf + have, end - begin - have, static_cast<off_t>(begin + have));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || r % static_cast<ssize_t>(kDirectAlign) != 0) {
      // Refused (EINVAL: alignment), failed, or the file ends here: a short
      // direct read is only complete at the end of the file.
      if (r > 0) have += static_cast<uint64_t>(r);
      ok = r > 0 && begin + have >= offset + len;
      break;
    }
    have += static_cast<uint64_t>(r);
  }
  ::fcntl(fd, F_SETFL, 0);
  if (!ok) return PreadFull(fd, out, len, offset);
  if (!straight) std::memcpy(out, buf + (offset - begin), len);
  *paged = false;
  return true;
}

}  // namespace

bool Store::Impl::VerifyBlocks(const std::shared_ptr<Entry>& e, uint64_t first, uint64_t last,
                               Handover* handover) {
  std::vector<std::pair<uint64_t, uint64_t>> todo;  // (block, checksum)
  uint32_t tier;
  uint64_t generation;
  Shard& shard = ShardOf(e->id);
  {
    MutexLock lock(shard.mu);
    for (uint64_t b = first; b <= last; ++b) {
      if (!Entry::Bit(e->verified, b)) todo.emplace_back(b, e->checksums[b]);
    }
    tier = e->tier;
    generation = e->generation;
  }
  if (todo.empty()) return true;
  bool ok = true;
  int fd = ::open(FilePath(tier, e->id).c_str(), kCacheReadFlags);
  ok = fd >= 0;
  // Aligned and rounded up, not zeroed: a block is read from the disk
  // straight into it (ReadColdDirect).
  std::shared_ptr<BlockBuffer> buf;
  const bool one = handover != nullptr && todo.size() == 1;
  bool into_out = false;
  // With drop_read_pages (a mount that keeps its own copy) the blocks are
  // read the way Read() reads them: from the disk without leaving pages.
  const bool drop = options.drop_read_pages;
  for (size_t i = 0; ok && i < todo.size(); ++i) {
    uint64_t len = BlockLength(e->key, todo[i].first);
    into_out = one && handover->out.size() >= len;
    if (!into_out && (!buf || buf->capacity() < len)) buf = BlockBuffer::Allocate(len);
    char* dst = into_out ? handover->out.data() : buf->data();
    const size_t capacity = into_out ? handover->out.size() : buf->capacity();
    uint64_t at = todo[i].first * options.block_size;
    bool paged = true;
    ok =
        (drop ? ReadColdDirect(fd, dst, len, capacity, at, &paged) : PreadFull(fd, dst, len, at)) &&
        XXH3_64bits(dst, len) == todo[i].second;
    if (ok && drop && paged) {
      ::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
    }
  }
  const bool hand_over = ok && one;
  // A small object verified: its file may now be opened by readers outside
  // the store (Store::FileLayout), which trust files changed since Open.
  if (ok && e->blocks == 1 && ::futimens(fd, nullptr) != 0) {
    GLOG_DEBUG("store: futimens {}: {}", FilePath(tier, e->id), std::strerror(errno));
  }
  if (fd >= 0) ::close(fd);
  MutexLock lock(shard.mu);
  if (!CurrentLocked(shard, e, generation)) return false;
  if (!ok) {
    GLOG_WARN("store: {} (dataset {}, key {}) failed verification; dropped", FilePath(tier, e->id),
              e->key.dataset, e->key.key);
    counters.checksum_failures.fetch_add(1, std::memory_order_relaxed);
    DropLocked(shard, e);
    return false;
  }
  for (const auto& [b, sum] : todo) Entry::SetBit(e->verified, b);
  if (hand_over) {
    if (!into_out) handover->bytes = std::move(buf);
    handover->filled = true;
  }
  return true;
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

uint64_t Store::block_size() const { return impl_->options.block_size; }

Store::FileLayout Store::file_layout() const {
  FileLayout out{.block_size = impl_->options.block_size,
                 .trusted_since_ns = impl_->opened_realtime_ns};
  for (const auto& tier : impl_->tiers) out.tier_paths.push_back(tier->level.path);
  return out;
}

Result<size_t> Store::Read(const ObjectKey& key, uint64_t offset, std::span<char> out,
                           bool count_miss) {
  Impl& s = *impl_;
  auto miss = [&]() -> Status {
    if (count_miss) {
      s.counters.read_misses.fetch_add(1, std::memory_order_relaxed);
      s.counters.miss_bytes.fetch_add(out.size(), std::memory_order_relaxed);
    }
    return NotFound("store: " + key.dataset + "/" + key.key + " not cached");
  };
  uint64_t len = offset >= key.size ? 0 : std::min<uint64_t>(out.size(), key.size - offset);
  uint64_t first = std::min(offset, key.size ? key.size - 1 : 0) / s.options.block_size;
  uint64_t last = len ? (offset + len - 1) / s.options.block_size : first;
  ObjectId id = IdOf(key);
  Shard& shard = s.ShardOf(id);
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Entry> e;
    uint32_t tier;
    uint64_t generation;
    bool need_verify = false;
    {
      MutexLock lock(shard.mu);
      e = s.FindLocked(shard, id, key);
      if (!e) return miss();
      for (uint64_t b = first; b <= last; ++b) {
        if (!Entry::Bit(e->present, b)) return miss();
        need_verify |= !Entry::Bit(e->verified, b);
      }
      tier = e->tier;
      generation = e->generation;
    }
    // The first read of a block after a restart checks it against its
    // checksum; a read within that one block is then served from the bytes
    // just checked instead of reading the file a second time (a read of the
    // whole block, as a small file's first read is, gets them read straight
    // into `out`).
    const uint64_t block_start = first * s.options.block_size;
    Store::Impl::Handover handover;
    if (need_verify) {
      if (first == last && len > 0 && offset == block_start && len == s.BlockLength(key, first)) {
        handover.out = out;
      }
      if (!s.VerifyBlocks(e, first, last, first == last ? &handover : nullptr)) return miss();
    }
    if (len == 0) break;
    if (handover.filled) {
      if (handover.out.empty()) {
        std::memcpy(out.data(), handover.bytes->data() + (offset - block_start), len);
      }
      e->last_use.store(s.NextTick(), std::memory_order_relaxed);
      s.counters.read_hits.fetch_add(1, std::memory_order_relaxed);
      s.counters.hit_bytes.fetch_add(len, std::memory_order_relaxed);
      return static_cast<size_t>(len);
    }
    int fd = ::open(s.FilePath(tier, id).c_str(), kCacheReadFlags);
    if (fd < 0) continue;                  // moved or evicted meanwhile: look again
    if (!s.StillCurrent(e, generation)) {  // the open may have found a later admission's file
      ::close(fd);
      continue;
    }
    bool paged = true;
    bool ok = s.options.drop_read_pages
                  ? ReadColdDirect(fd, out.data(), len, out.size(), offset, &paged)
                  : PreadFull(fd, out.data(), len, offset);
    if (ok && paged && s.options.drop_read_pages) {
      ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
    }
    ::close(fd);
    if (!ok) return miss();
    e->last_use.store(s.NextTick(), std::memory_order_relaxed);
    s.counters.read_hits.fetch_add(1, std::memory_order_relaxed);
    s.counters.hit_bytes.fetch_add(len, std::memory_order_relaxed);
    return static_cast<size_t>(len);
  }
  if (len == 0) {
    s.counters.read_hits.fetch_add(1, std::memory_order_relaxed);
    return size_t{0};
  }
  return miss();
}

bool Store::Contains(const ObjectKey& key) const {
  const Impl& s = *impl_;
  ObjectId id = IdOf(key);
  const Shard& shard = s.ShardOf(id);
  MutexLock lock(shard.mu);
  auto e = s.FindLocked(shard, id, key);
  return e && e->complete();
}

bool Store::ContainsRange(const ObjectKey& key, uint64_t offset, uint64_t len) const {
  const Impl& s = *impl_;
  ObjectId id = IdOf(key);
  const Shard& shard = s.ShardOf(id);
  MutexLock lock(shard.mu);
  auto e = s.FindLocked(shard, id, key);
  if (!e) return false;
  if (offset >= key.size || len == 0) return true;
  uint64_t end = std::min(key.size, offset + len);
  for (uint64_t b = offset / s.options.block_size; b <= (end - 1) / s.options.block_size; ++b) {
    if (!Entry::Bit(e->present, b)) return false;
  }
  return true;
}

Result<CachedObjectInfo> Store::Describe(const ObjectKey& key) const {
  const Impl& s = *impl_;
  ObjectId id = IdOf(key);
  const Shard& shard = s.ShardOf(id);
  MutexLock lock(shard.mu);
  auto e = s.FindLocked(shard, id, key);
  if (!e) return NotFound("store: " + key.dataset + "/" + key.key + " not cached");
  return CachedObjectInfo{
      .tier = static_cast<int>(e->tier),
      .allocated_bytes = e->allocated,
      .blocks_present = e->present_count,
      .blocks_total = e->blocks,
      .complete = e->complete(),
      .path = s.FilePath(e->tier, id),
  };
}

Result<std::string> Store::Impl::CompleteFile(const ObjectKey& key, std::shared_ptr<Entry>* entry,
                                              uint64_t* generation) {
  ObjectId id = IdOf(key);
  Shard& shard = ShardOf(id);
  std::shared_ptr<Entry> e;
  uint32_t tier = 0;
  bool complete = false;
  {
    MutexLock lock(shard.mu);
    e = FindLocked(shard, id, key);
    complete = e && e->complete();
    if (complete) {
      tier = e->tier;
      *generation = e->generation;
    }
  }
  if (!complete || !VerifyBlocks(e, 0, e->blocks - 1)) {
    return NotFound("store: " + key.dataset + "/" + key.key + " not completely cached");
  }
  e->last_use.store(NextTick(), std::memory_order_relaxed);
  *entry = std::move(e);
  return FilePath(tier, id);
}

Result<int> Store::OpenCompleteFile(const ObjectKey& key) {
  Impl& s = *impl_;
  // Twice: the file may move to another tier, or the object be dropped and
  // admitted again, between the check and the open.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Entry> e;
    uint64_t generation = 0;
    Result<std::string> path = s.CompleteFile(key, &e, &generation);
    if (!path.ok()) return path.status();
    int fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (s.StillCurrent(e, generation)) return fd;
    ::close(fd);
  }
  return NotFound("store: " + key.dataset + "/" + key.key + " not completely cached");
}

Result<Store::BlockFile> Store::OpenBlockFile(const ObjectKey& key, uint64_t block) {
  Impl& s = *impl_;
  const ObjectId id = IdOf(key);
  Shard& shard = s.ShardOf(id);
  auto missing = [&] {
    return NotFound("store: " + key.dataset + "/" + key.key + " block " + std::to_string(block) +
                    " not cached");
  };
  // Twice, as in OpenCompleteFile: the file may move or be admitted again
  // between the check and the open.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Entry> e;
    uint32_t tier = 0;
    uint64_t generation = 0;
    bool verified = false;
    {
      MutexLock lock(shard.mu);
      e = s.FindLocked(shard, id, key);
      if (!e || block >= e->blocks || !Entry::Bit(e->present, block)) return missing();
      tier = e->tier;
      generation = e->generation;
      verified = Entry::Bit(e->verified, block);
    }
    if (!verified && !s.VerifyBlocks(e, block, block)) return missing();
    int fd = ::open(s.FilePath(tier, id).c_str(), kCacheReadFlags);
    if (fd < 0) continue;
    uint64_t checksum = 0;
    {
      MutexLock lock(shard.mu);
      const bool current = s.CurrentLocked(shard, e, generation) && Entry::Bit(e->present, block);
      if (current) checksum = e->checksums[block];
      if (!current) {
        ::close(fd);
        continue;
      }
    }
    e->last_use.store(s.NextTick(), std::memory_order_relaxed);
    s.counters.read_hits.fetch_add(1, std::memory_order_relaxed);
    const uint64_t length = s.BlockLength(key, block);
    s.counters.hit_bytes.fetch_add(length, std::memory_order_relaxed);
    return BlockFile{
        .fd = fd, .offset = block * s.options.block_size, .length = length, .checksum = checksum};
  }
  return missing();
}

Result<std::string> Store::CompleteFilePath(const ObjectKey& key) {
  std::shared_ptr<Entry> e;
  uint64_t generation = 0;
  return impl_->CompleteFile(key, &e, &generation);
}

Status Store::Remove(const ObjectKey& key) {
  Impl& s = *impl_;
  ObjectId id = IdOf(key);
  Shard& shard = s.ShardOf(id);
  MutexLock lock(shard.mu);
  auto e = s.FindLocked(shard, id, key);
  if (e) s.DropLocked(shard, e);
  return Status::Ok();
}

StoreStats Store::stats() const {
  const Impl& s = *impl_;
  const Counters& c = s.counters;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  StoreStats out{
      .read_hits = get(c.read_hits),
      .read_misses = get(c.read_misses),
      .hit_bytes = get(c.hit_bytes),
      .miss_bytes = get(c.miss_bytes),
      .admissions = get(c.admissions),
      .refusals = get(c.refusals),
      .no_space = get(c.no_space),
      .evictions = get(c.evictions),
      .demotions = get(c.demotions),
      .checksum_failures = get(c.checksum_failures),
      .recovered_objects = get(c.recovered_objects),
      .recovery_dropped = get(c.recovery_dropped),
      .orphans_removed = get(c.orphans_removed),
      .near_refused = get(c.near_refused),
      .near_evictions = get(c.near_evictions),
  };
  for (const Shard& shard : s.shards) {
    MutexLock lock(shard.mu);
    out.complete_objects += shard.complete.objects;
    out.complete_bytes += shard.complete.bytes;
    out.owned_complete_objects += shard.complete.owned_objects;
    out.owned_complete_bytes += shard.complete.owned_bytes;
    out.owned_block_bytes += shard.owned_block_bytes;
  }
  for (const auto& t : s.tiers) {
    out.tiers.push_back(TierStats{.medium = t->level.medium,
                                  .path = t->level.path,
                                  .quota = t->level.quota,
                                  .used_bytes = get(t->used),
                                  .files = get(t->files)});
  }
  return out;
}

void Store::SetOwnershipOracle(OwnershipOracle oracle, BlockOwnershipOracle block_oracle) {
  {
    // Eviction passes hold maintenance_mu: once this returns, none uses the old oracle.
    MutexLock lock(impl_->maintenance_mu);
    impl_->ownership.store(std::make_shared<const OwnershipOracle>(std::move(oracle)));
    impl_->block_ownership.store(
        std::make_shared<const BlockOwnershipOracle>(std::move(block_oracle)));
  }
  RecountOwnership();
}

void Store::RecountOwnership() {
  Impl& s = *impl_;
  // Serialized, and the oracles are loaded once holding recount_mu: a later
  // recount (after a later oracle change) always applies last.
  MutexLock recount(s.recount_mu);
  std::shared_ptr<const OwnershipOracle> oracle = s.ownership.load();
  std::shared_ptr<const BlockOwnershipOracle> block_oracle = s.block_ownership.load();
  const bool all_owned = !oracle || !*oracle;
  // Per shard, of each entry with a present block: what it was at the
  // snapshot, and the oracles' answers for it.
  struct Seen {
    std::shared_ptr<Entry> entry;
    bool complete;
    uint64_t present_count;
    size_t first_word;  // its presence bitmap in `words`
    bool owned = true;
    uint64_t block_bytes = 0;
  };
  std::vector<Seen> seen;
  std::vector<uint64_t> words;
  for (Shard& shard : s.shards) {
    seen.clear();
    words.clear();
    {
      MutexLock lock(shard.mu);
      for (const auto& [id, e] : shard.map) {
        if (e->present_count == 0) continue;
        seen.push_back({.entry = e,
                        .complete = e->complete(),
                        .present_count = e->present_count,
                        .first_word = words.size()});
        words.insert(words.end(), e->present.begin(), e->present.end());
      }
    }
    // The key is immutable and the bitmap a copy: the oracles run without
    // the shard lock.
    for (Seen& v : seen) {
      const Entry& e = *v.entry;
      if (v.complete && !all_owned) v.owned = (*oracle)(e.key);
      v.block_bytes =
          s.OwnedBlockBytes(e.key, words.data() + v.first_word, e.blocks, block_oracle.get());
    }
    MutexLock lock(shard.mu);
    for (const Seen& v : seen) {
      Entry& e = *v.entry;
      auto it = shard.map.find(e.id);
      // Dropped meanwhile: already uncounted.
      if (it == shard.map.end() || it->second != v.entry) continue;
      // Completed meanwhile: counted with the current oracle at completion.
      if (v.complete) s.SetCountedOwnedLocked(shard, e, v.owned);
      // Blocks arrived meanwhile (presence only grows): count them all again
      // here, under the lock, as the block oracle allows.
      uint64_t block_bytes =
          e.present_count == v.present_count
              ? v.block_bytes
              : s.OwnedBlockBytes(e.key, e.present.begin(), e.blocks, block_oracle.get());
      s.SetOwnedBlockBytesLocked(shard, e, block_bytes);
    }
  }
}

void Store::RunEvictionOnce() {
  MutexLock lock(impl_->maintenance_mu);
  impl_->EvictOnce();
}

Status Store::Checkpoint() {
  MutexLock lock(impl_->maintenance_mu);
  return impl_->CheckpointLocked();
}

Store::~Store() {
  {
    MutexLock lock(impl_->bg_mu);
    impl_->bg_stop = true;
  }
  impl_->bg_cv.NotifyAll();
  if (impl_->bg_thread.joinable()) impl_->bg_thread.join();
  Status s = Checkpoint();
  if (!s.ok()) GLOG_WARN("store: checkpoint at close failed: {}", s.ToString());
}

char* DirectBuffer(size_t n) {
  struct Buf {
    std::unique_ptr<char, decltype(&std::free)> data{nullptr, &std::free};
    size_t size = 0;
  };
  static thread_local Buf buf;
  if (n > buf.size) {
    void* p = nullptr;
    if (::posix_memalign(&p, kDirectAlign, n) != 0) return nullptr;
    buf.data.reset(static_cast<char*>(p));
    buf.size = n;
  }
  return buf.data.get();
}

}  // namespace granary
