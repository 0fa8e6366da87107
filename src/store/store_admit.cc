// Store admission: whole objects (tmp file + rename) and blocks of large
// objects (pwrite into a sparse file). See store.h for the contract.
//
// Crash rule: a journal record is appended only after the bytes it describes
// are in the file under its final name, so replay never claims more than what
// survived a process kill.
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/file_modes.h"
#include "common/log.h"
#include "common/mutex.h"
#include "store/store.h"
#include "store/store_impl.h"

namespace granary {
namespace {

bool IsNoSpace(int err) { return err == ENOSPC || err == EDQUOT; }

// Writes all of `data` at `offset` (pwrite) or sequentially (offset < 0).
// Returns 0 or the errno.
int WriteFull(int fd, std::string_view data, int64_t offset) {
  while (!data.empty()) {
    ssize_t n = offset < 0 ? ::write(fd, data.data(), data.size())
                           : ::pwrite(fd, data.data(), data.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<size_t>(n));
    if (offset >= 0) offset += n;
  }
  return 0;
}

// Larger objects go to the disk in pieces of this size, so each admitting
// thread's aligned buffer (DirectBuffer) stays small.
constexpr size_t kDirectChunk = 1 << 20;

// Writes `data` at `offset` (a multiple of kDirectAlign) of `fd` (opened
// with O_DIRECT): the largest multiple of kDirectAlign straight to the disk
// -- from `data` itself when it is aligned (a BlockBuffer), else through this
// thread's aligned buffer -- then the remaining tail (< 4 KiB) through the
// page cache after clearing O_DIRECT on the fd. (Padding the tail and cutting
// the file back with ftruncate would make ext4 read that block back from the
// disk to zero it: it cost more than the whole direct write.) Returns 0 or
// the errno (EINVAL: the file system wants another alignment, or no O_DIRECT
// at all).
int WriteDirect(int fd, std::string_view data, uint64_t offset) {
  size_t aligned = data.size() / kDirectAlign * kDirectAlign;
  const bool straight = reinterpret_cast<uintptr_t>(data.data()) % kDirectAlign == 0;
  for (size_t off = 0; off < aligned;) {
    size_t chunk = straight ? aligned - off : std::min(aligned - off, kDirectChunk);
    const char* p = data.data() + off;
    if (!straight) {
      char* bounce = DirectBuffer(chunk);
      if (bounce == nullptr) return ENOMEM;
      std::memcpy(bounce, p, chunk);
      p = bounce;
    }
    for (size_t done = 0; done < chunk;) {
      ssize_t n = ::pwrite(fd, p + done, chunk - done, static_cast<off_t>(offset + off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      if (n == 0 || n % kDirectAlign != 0) return EIO;
      done += static_cast<size_t>(n);
    }
    off += chunk;
  }
  if (aligned == data.size()) return 0;
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) return errno;
  return WriteFull(fd, data.substr(aligned), static_cast<int64_t>(offset + aligned));
}

// Allocated bytes of the whole object (each block rounded up to 4 KiB).
uint64_t WholeObjectAlloc(uint64_t size, uint64_t block_size) {
  if (size <= block_size) return RoundUpAlloc(size);
  uint64_t full = size / block_size;
  return full * RoundUpAlloc(block_size) + RoundUpAlloc(size - full * block_size);
}

}  // namespace

int Store::Impl::ReserveInFastest(uint64_t bytes) {
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i]->Reserve(bytes)) return static_cast<int>(i);
  }
  return -1;
}

void Store::Impl::NoteNoSpace(uint32_t tier, uint64_t bytes, bool disk_full) {
  counters.no_space.fetch_add(1, std::memory_order_relaxed);
  if (disk_full) {
    // Free at least a few objects' worth so the next admissions fit.
    tiers[tier]->pressure.fetch_add(std::max<uint64_t>(bytes * 4, 1 << 20),
                                    std::memory_order_relaxed);
  }
  bg_cv.NotifyOne();
}

int Store::Impl::WriteNewFile(int tier, const std::string& path, std::string_view data,
                              bool want_direct) {
  TierState& t = *tiers[static_cast<size_t>(tier)];
  bool direct =
      want_direct && t.level.medium != Medium::kMem && t.direct_ok.load(std::memory_order_relaxed);
  int fd = ::open(path.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | (direct ? O_DIRECT : 0),
                  kCacheFileMode);
  if (fd < 0 && direct && errno == EINVAL) {
    // This file system does not do O_DIRECT (nothing was created).
    t.direct_ok.store(false, std::memory_order_relaxed);
    GLOG_INFO("store: {} refuses O_DIRECT; admitting through the page cache", t.level.path);
    return WriteNewFile(tier, path, data, false);
  }
  if (fd < 0) return errno;
  int err = direct ? WriteDirect(fd, data, 0) : WriteFull(fd, data, -1);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (direct && err == EINVAL) {
    t.direct_ok.store(false, std::memory_order_relaxed);
    GLOG_INFO("store: {} refused an aligned O_DIRECT write; admitting through the page cache",
              t.level.path);
    ::unlink(path.c_str());
    return WriteNewFile(tier, path, data, false);
  }
  return err;
}

int Store::Impl::WriteBlock(uint32_t tier, const std::string& path, std::string_view data,
                            uint64_t offset, bool want_direct) {
  TierState& t = *tiers[tier];
  bool direct =
      want_direct && t.level.medium != Medium::kMem && t.direct_ok.load(std::memory_order_relaxed);
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | (direct ? O_DIRECT : 0));
  if (fd < 0 && direct && errno == EINVAL) {
    t.direct_ok.store(false, std::memory_order_relaxed);
    GLOG_INFO("store: {} refuses O_DIRECT; admitting through the page cache", t.level.path);
    return WriteBlock(tier, path, data, offset, false);
  }
  if (fd < 0) return errno;
  int err =
      direct ? WriteDirect(fd, data, offset) : WriteFull(fd, data, static_cast<int64_t>(offset));
  if (::close(fd) != 0 && err == 0) err = errno;
  if (direct && err == EINVAL) {
    t.direct_ok.store(false, std::memory_order_relaxed);
    GLOG_INFO("store: {} refused an aligned O_DIRECT write; admitting through the page cache",
              t.level.path);
    return WriteBlock(tier, path, data, offset, false);  // the same range again, buffered
  }
  return err;
}

Result<bool> Store::Impl::AdmitSmall(const ObjectKey& key, const ObjectId& id,
                                     std::string_view data, bool served,
                                     std::optional<uint64_t> xxh3) {
  Shard& shard = ShardOf(id);
  {
    MutexLock lock(shard.mu);
    if (FindLocked(shard, id, key)) return true;
  }
  uint64_t alloc = RoundUpAlloc(key.size);
  if (!policy->ShouldAdmit({.dataset = key.dataset,
                            .object_bytes = alloc,
                            .used_bytes = UsedAll(),
                            .capacity = Capacity()})) {
    counters.refusals.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  int tier = ReserveInFastest(alloc);
  if (tier < 0) {
    NoteNoSpace(static_cast<uint32_t>(tiers.size() - 1), alloc, false);
    return false;
  }
  std::string final_path = FilePath(tier, id);
  std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(tmp_seq.fetch_add(1, std::memory_order_relaxed));
  int err =
      WriteNewFile(tier, tmp, data, served && options.drop_read_pages && options.direct_writes);
  auto undo = [&] {
    ::unlink(tmp.c_str());
    tiers[tier]->Release(alloc);
  };
  if (err != 0) {
    undo();
    if (IsNoSpace(err)) {
      NoteNoSpace(tier, alloc, true);
      return false;
    }
    return ErrnoStatus("store: write " + tmp, err);
  }
  const uint64_t checksum = xxh3 ? *xxh3 : XXH3_64bits(data.data(), data.size());
  MutexLock lock(shard.mu);
  if (shard.map.count(id)) {  // a concurrent admission won
    undo();
    return FindLocked(shard, id, key) != nullptr;
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    err = errno;
    undo();
    return ErrnoStatus("store: rename " + tmp, err);
  }
  auto e = std::make_shared<Entry>();
  e->id = id;
  e->key = key;
  e->tier = static_cast<uint32_t>(tier);
  e->blocks = 1;
  e->checksums = U64Array(1, checksum);
  e->present = U64Array(1, 1);
  e->verified = U64Array(1, 1);
  e->present_count = 1;
  e->allocated = alloc;
  e->last_use.store(NextTick(), std::memory_order_relaxed);
  Status s =
      AppendJournal(store_format::RecordType::kEntry, store_format::EncodeEntry(ToRecord(*e)));
  if (!s.ok()) {
    ::unlink(final_path.c_str());
    tiers[tier]->Release(alloc);
    if (s.code() == Code::kNoSpace) {
      NoteNoSpace(tier, alloc, true);
      return false;
    }
    return s;
  }
  CountCompleteLocked(shard, *e);
  CountOwnedBlockLocked(shard, *e, 0);
  shard.map.emplace(id, std::move(e));
  tiers[tier]->files.fetch_add(1, std::memory_order_relaxed);
  counters.admissions.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Result<std::shared_ptr<Entry>> Store::Impl::CreateLargeEntryLocked(Shard& shard,
                                                                   const ObjectKey& key,
                                                                   const ObjectId& id,
                                                                   uint64_t alloc) {
  if (!policy->ShouldAdmit({.dataset = key.dataset,
                            .object_bytes = WholeObjectAlloc(key.size, options.block_size),
                            .used_bytes = UsedAll(),
                            .capacity = Capacity()})) {
    counters.refusals.fetch_add(1, std::memory_order_relaxed);
    return std::shared_ptr<Entry>();
  }
  int t = ReserveInFastest(alloc);
  if (t < 0) {
    NoteNoSpace(static_cast<uint32_t>(tiers.size() - 1), alloc, false);
    return std::shared_ptr<Entry>();
  }
  auto tier = static_cast<uint32_t>(t);
  std::string path = FilePath(tier, id);
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, kCacheFileMode);
  int err = fd < 0 ? errno : (::ftruncate(fd, static_cast<off_t>(key.size)) != 0 ? errno : 0);
  if (fd >= 0) ::close(fd);
  if (err != 0) {
    ::unlink(path.c_str());
    tiers[tier]->Release(alloc);
    if (!IsNoSpace(err)) return ErrnoStatus("store: create " + path, err);
    NoteNoSpace(tier, alloc, true);
    return std::shared_ptr<Entry>();
  }
  auto e = std::make_shared<Entry>();
  e->id = id;
  e->key = key;
  e->tier = tier;
  e->blocks = BlockCount(key.size);
  size_t words = (e->blocks + 63) / 64;
  e->checksums.assign(e->blocks, 0);
  e->present.assign(words, 0);
  e->verified.assign(words, 0);
  e->last_use.store(NextTick(), std::memory_order_relaxed);
  shard.map.emplace(id, e);
  tiers[tier]->files.fetch_add(1, std::memory_order_relaxed);
  return e;
}

Result<bool> Store::Impl::CommitBlockLocked(const std::shared_ptr<Entry>& e, uint64_t block,
                                            uint64_t checksum, uint64_t alloc) {
  store_format::BlockRecord rec{.object = {.id_hi = e->id.hi,
                                           .id_lo = e->id.lo,
                                           .dataset = e->key.dataset,
                                           .key = e->key.key,
                                           .etag = e->key.etag,
                                           .size = e->key.size,
                                           .tier = e->tier,
                                           .last_use = e->last_use.load(std::memory_order_relaxed)},
                                .block = block,
                                .checksum = checksum};
  Status s = AppendJournal(store_format::RecordType::kBlock, store_format::EncodeBlock(rec));
  if (!s.ok()) {
    tiers[e->tier]->Release(alloc);
    if (s.code() != Code::kNoSpace) return s;
    NoteNoSpace(e->tier, alloc, true);
    return false;
  }
  e->checksums[block] = checksum;
  Entry::SetBit(e->present, block);
  Entry::SetBit(e->verified, block);
  e->present_count++;
  e->allocated += alloc;
  Shard& shard = ShardOf(e->id);
  shard.mu.AssertHeld();  // the caller holds e's shard lock (see the declaration)
  CountOwnedBlockLocked(shard, *e, block);
  if (e->complete()) CountCompleteLocked(shard, *e);  // its last block
  counters.admissions.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Result<bool> Store::Impl::AdmitLargeBlock(const ObjectKey& key, const ObjectId& id, uint64_t block,
                                          std::string_view data, bool served,
                                          std::optional<uint64_t> xxh3) {
  Shard& shard = ShardOf(id);
  uint64_t alloc = RoundUpAlloc(data.size());
  std::shared_ptr<Entry> e;
  uint64_t generation;
  uint32_t tier;
  bool created = false;
  {
    MutexLock lock(shard.mu);
    e = FindLocked(shard, id, key);
    if (e && Entry::Bit(e->present, block)) return true;
    if (!e && shard.map.count(id)) return false;  // same id, other identity: never in practice
    if (e && !tiers[e->tier]->Reserve(alloc)) {
      NoteNoSpace(e->tier, alloc, false);
      return false;
    }
    if (!e) {
      ASSIGN_OR_RETURN(e, CreateLargeEntryLocked(shard, key, id, alloc));
      if (!e) return false;
      created = true;
    }
    generation = e->generation;
    tier = e->tier;
  }
  std::string path = FilePath(tier, id);
  int err = WriteBlock(tier, path, data, block * options.block_size,
                       served && options.drop_read_pages && options.direct_writes);
  const uint64_t checksum = err != 0 ? 0 : xxh3 ? *xxh3 : XXH3_64bits(data.data(), data.size());

  MutexLock lock(shard.mu);
  auto it = shard.map.find(id);
  bool same = it != shard.map.end() && it->second == e && e->generation == generation;
  if (err == 0 && same && !Entry::Bit(e->present, block)) {
    return CommitBlockLocked(e, block, checksum, alloc);
  }
  tiers[tier]->Release(alloc);
  if (same && created && e->present_count == 0 && err != 0) DropLocked(shard, e);
  if (err == 0) return same;  // moved or dropped meanwhile, or a concurrent writer won
  if (IsNoSpace(err)) {
    NoteNoSpace(tier, alloc, true);
    return false;
  }
  if (!same) return false;
  return ErrnoStatus("store: write " + path, err);
}

Result<bool> Store::AdmitObject(const ObjectKey& key, std::string_view data) {
  if (data.size() != key.size) {
    return InvalidArgument("store: admit " + key.dataset + "/" + key.key + ": got " +
                           std::to_string(data.size()) + " bytes, object size is " +
                           std::to_string(key.size));
  }
  uint64_t bs = impl_->options.block_size;
  if (key.size <= bs) return impl_->AdmitSmall(key, IdOf(key), data);
  ObjectId id = IdOf(key);
  for (uint64_t b = 0; b * bs < key.size; ++b) {
    ASSIGN_OR_RETURN(bool ok, impl_->AdmitLargeBlock(key, id, b, data.substr(b * bs, bs), false));
    if (!ok) return false;
  }
  return true;
}

Result<bool> Store::AdmitBlock(const ObjectKey& key, uint64_t block_index, std::string_view data,
                               bool served, AdmitKind kind, std::optional<uint64_t> xxh3) {
  uint64_t bs = impl_->options.block_size;
  uint64_t blocks = impl_->BlockCount(key.size);
  if (block_index >= blocks) {
    return InvalidArgument("store: admit " + key.dataset + "/" + key.key + ": block " +
                           std::to_string(block_index) + " out of range (object has " +
                           std::to_string(blocks) + " blocks)");
  }
  uint64_t want = impl_->BlockLength(key, block_index);
  if (data.size() != want) {
    return InvalidArgument("store: admit " + key.dataset + "/" + key.key + " block " +
                           std::to_string(block_index) + ": got " + std::to_string(data.size()) +
                           " bytes, expected " + std::to_string(want));
  }
  if (kind == AdmitKind::kNear &&
      impl_->UsedAll() + RoundUpAlloc(data.size()) > impl_->Capacity() && !Contains(key)) {
    impl_->counters.near_refused.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (key.size <= bs) return impl_->AdmitSmall(key, IdOf(key), data, served, xxh3);
  return impl_->AdmitLargeBlock(key, IdOf(key), block_index, data, served, xxh3);
}

}  // namespace granary
