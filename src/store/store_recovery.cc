// Store::Open and crash recovery: load the checkpoint, replay journals up to
// the first torn record, drop entries whose file is missing or has the wrong
// size, delete orphan files (tmp files and files the index does not know),
// then write a fresh checkpoint. See docs/format-store.md. Directories and
// files of a cache written with wider modes are made private on the way
// (common/file_modes.h): the tier and index dirs here, each kept file where
// ValidateFiles stats it anyway.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include "common/file_modes.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/thread_pool.h"
#include "store/store.h"
#include "store/store_impl.h"

namespace granary {
namespace {

Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), kCacheDirMode) == 0 || errno == EEXIST) return Status::Ok();
  return ErrnoStatus("store: mkdir " + path, errno);
}

// Sets `path` to `mode` unless it has it already (stat'ed as `st`). A failure
// (not the owner) leaves the cache working, with a warning.
void RestrictMode(const std::string& path, const struct stat& st, mode_t mode) {
  if ((st.st_mode & 07777) == mode) return;
  if (::chmod(path.c_str(), mode) != 0) {
    GLOG_WARN("store: cannot make {} private (chmod {:o}): {}", path, mode, std::strerror(errno));
  }
}

// A cache directory: created with kCacheDirMode, or set to it if it exists.
Status MakePrivateDir(const std::string& path) {
  RETURN_IF_ERROR(MakeDir(path));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("store: stat " + path, errno);
  RestrictMode(path, st, kCacheDirMode);
  return Status::Ok();
}

// Sets the regular files directly in `dir` (journals, checkpoint, LOCK) to kCacheFileMode.
void MakeFilesPrivate(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (dirent* ent = ::readdir(d)) {
    struct stat st {};
    if (ent->d_type != DT_REG && ent->d_type != DT_UNKNOWN) continue;
    if (::fstatat(::dirfd(d), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    RestrictMode(dir + "/" + ent->d_name, st, kCacheFileMode);
  }
  ::closedir(d);
}

// Marks a tier directory as the top of a hierarchy (FS_TOPDIR_FL, `chattr +T`)
// before its fan-out directories are made, so ext4's Orlov allocator spreads
// them, and the cache files in them, over the file system's block groups
// instead of packing them next to the tier directory. On ext4 without a
// journal, creating a file scans past every inode of its group deleted within
// the last 1-6 minutes (recently_deleted(), find_inode_bit()), so packing the
// cache into the group where the previous cache, a job's scratch files or
// anything else was just deleted cost up to 0.4-0.7 ms of CPU per cache file
// here, spread 50-70 us (docs/benchmarks.md, "CPU per cold image"). Only
// directories made after the flag is set move; file systems without the flag
// (tmpfs, xfs, btrfs) refuse it, which changes nothing.
void SpreadSubdirectories(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  int flags = 0;
  if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_TOPDIR_FL) == 0) {
    flags |= FS_TOPDIR_FL;
    (void)::ioctl(fd, FS_IOC_SETFLAGS, &flags);  // an optimisation: refusal is fine
  }
  ::close(fd);
}

Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') RETURN_IF_ERROR(MakeDir(path.substr(0, pos)));
  }
  return Status::Ok();
}

bool ParseHexName(std::string_view name, ObjectId& id) {
  if (name.size() != 32) return false;
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    char c = name[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    parts[i / 16] = parts[i / 16] << 4 | static_cast<uint64_t>(v);
  }
  id = ObjectId{.hi = parts[0], .lo = parts[1]};
  return true;
}

// Journal generations present in `dir`, ascending.
std::vector<uint64_t> ListJournals(const std::string& dir) {
  std::vector<uint64_t> gens;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return gens;
  while (dirent* ent = ::readdir(d)) {
    std::string_view name = ent->d_name;
    if (name.rfind("journal-", 0) != 0 || name.size() != 8 + 16) continue;
    gens.push_back(std::strtoull(ent->d_name + 8, nullptr, 16));
  }
  ::closedir(d);
  std::sort(gens.begin(), gens.end());
  return gens;
}

}  // namespace

void Store::Impl::UpsertEntry(store_format::EntryRecord&& rec) {
  ObjectKey key{.dataset = std::move(rec.dataset),
                .key = std::move(rec.key),
                .etag = std::move(rec.etag),
                .size = rec.size};
  ObjectId id = IdOf(key);
  uint64_t blocks = BlockCount(key.size);
  size_t words = (blocks + 63) / 64;
  if (id != ObjectId{.hi = rec.id_hi, .lo = rec.id_lo} || rec.checksums.size() != blocks ||
      rec.present.size() != words) {
    // Another block size or a damaged record: forget it (its file becomes an orphan).
    return;
  }
  auto e = std::make_shared<Entry>();
  e->id = id;
  e->key = std::move(key);
  e->tier = rec.tier;
  e->blocks = blocks;
  e->checksums = U64Array(rec.checksums);
  e->present = U64Array(rec.present);
  if (blocks % 64) e->present.back() &= (1ull << (blocks % 64)) - 1;
  e->verified.assign(words, 0);
  for (uint64_t w : e->present) e->present_count += static_cast<uint64_t>(std::popcount(w));
  e->last_use.store(rec.last_use, std::memory_order_relaxed);
  Shard& shard = ShardOf(id);
  MutexLock lock(shard.mu);  // uncontended: recovery runs before the store is shared
  shard.map[id] = std::move(e);
}

void Store::Impl::UpsertBlock(const store_format::BlockRecord& rec) {
  const store_format::EntryRecord& o = rec.object;
  ObjectKey key{.dataset = o.dataset, .key = o.key, .etag = o.etag, .size = o.size};
  ObjectId id = IdOf(key);
  uint64_t blocks = BlockCount(key.size);
  if (id != ObjectId{.hi = o.id_hi, .lo = o.id_lo} || rec.block >= blocks) return;
  Shard& shard = ShardOf(id);
  MutexLock lock(shard.mu);  // uncontended: recovery runs before the store is shared
  std::shared_ptr<Entry>& slot = shard.map[id];
  if (!slot) {
    slot = std::make_shared<Entry>();
    slot->id = id;
    slot->key = std::move(key);
    slot->blocks = blocks;
    slot->checksums.assign(blocks, 0);
    slot->present.assign((blocks + 63) / 64, 0);
    slot->verified.assign((blocks + 63) / 64, 0);
  }
  Entry& e = *slot;
  e.tier = o.tier;
  e.last_use.store(std::max(e.last_use.load(), o.last_use), std::memory_order_relaxed);
  e.checksums[rec.block] = rec.checksum;
  if (!Entry::Bit(e.present, rec.block)) {
    Entry::SetBit(e.present, rec.block);
    e.present_count++;
  }
}

void Store::Impl::ApplyRecord(store_format::RecordType type, std::string_view payload) {
  using store_format::RecordType;
  if (type == RecordType::kEntry) {
    auto rec = store_format::DecodeEntry(payload);
    if (rec.ok()) UpsertEntry(std::move(*rec));
  } else if (type == RecordType::kBlock) {
    auto rec = store_format::DecodeBlock(payload);
    if (rec.ok()) UpsertBlock(*rec);
  } else if (type == RecordType::kRemove) {
    ObjectId id;
    if (store_format::DecodeRemove(payload, id.hi, id.lo).ok()) {
      Shard& shard = ShardOf(id);
      MutexLock lock(shard.mu);
      shard.map.erase(id);
    }
  }
}

// Recovery scans run over shards / fan-out directories in parallel: each
// task touches only its own shard (or reads the maps), and the totals are atomics.
constexpr int kRecoveryParallelism = 8;

void Store::Impl::ValidateFiles() {
  std::atomic<uint64_t> max_tick{0}, kept{0}, dropped{0};
  ParallelFor(shards.size(), kRecoveryParallelism, [&](size_t i) {
    Shard& shard = shards[i];
    // Nothing else runs yet; the lock is for the *Locked helpers' contract.
    MutexLock lock(shard.mu);
    shard.complete = CompleteCounts{};
    shard.owned_block_bytes = 0;
    uint64_t shard_max = 0;
    for (auto it = shard.map.begin(); it != shard.map.end();) {
      Entry& e = *it->second;
      struct stat st;
      const std::string path = e.tier < tiers.size() ? FilePath(e.tier, e.id) : std::string();
      bool ok = e.tier < tiers.size() && e.present_count > 0 && ::stat(path.c_str(), &st) == 0 &&
                S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == e.key.size;
      if (!ok) {
        dropped.fetch_add(1, std::memory_order_relaxed);
        it = shard.map.erase(it);
        continue;
      }
      RestrictMode(path, st, kCacheFileMode);
      e.allocated = 0;
      for (uint64_t b = 0; b < e.blocks; ++b) {
        if (Entry::Bit(e.present, b)) e.allocated += RoundUpAlloc(BlockLength(e.key, b));
      }
      tiers[e.tier]->used.fetch_add(e.allocated, std::memory_order_relaxed);
      tiers[e.tier]->files.fetch_add(1, std::memory_order_relaxed);
      if (e.complete()) CountCompleteLocked(shard, e);
      e.counted_owned_block_bytes = 0;
      SetOwnedBlockBytesLocked(
          shard, e,
          OwnedBlockBytes(e.key, e.present.begin(), e.blocks, block_ownership.load().get()));
      shard_max = std::max(shard_max, e.last_use.load(std::memory_order_relaxed));
      kept.fetch_add(1, std::memory_order_relaxed);
      ++it;
    }
    uint64_t cur = max_tick.load();
    while (cur < shard_max && !max_tick.compare_exchange_weak(cur, shard_max)) {
    }
  });
  use_tick.store(max_tick.load(), std::memory_order_relaxed);
  counters.recovered_objects.store(kept.load(), std::memory_order_relaxed);
  counters.recovery_dropped.store(dropped.load(), std::memory_order_relaxed);
}

void Store::Impl::RemoveOrphans() {
  std::atomic<uint64_t> removed{0};
  ParallelFor(tiers.size() * 256, kRecoveryParallelism, [&](size_t task) {
    auto t = static_cast<uint32_t>(task / 256);
    char name[3];
    std::snprintf(name, sizeof(name), "%02x", static_cast<int>(task % 256));
    std::string dir = tiers[t]->level.path + "/" + name;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    while (dirent* ent = ::readdir(d)) {
      std::string_view file = ent->d_name;
      if (file == "." || file == "..") continue;
      ObjectId id;
      bool known = false;
      if (ParseHexName(file, id)) {
        const Shard& shard = ShardOf(id);
        MutexLock lock(shard.mu);
        auto it = shard.map.find(id);
        known = it != shard.map.end() && it->second->tier == t;
      }
      if (!known && ::unlink((dir + "/" + std::string(file)).c_str()) == 0) {
        removed.fetch_add(1, std::memory_order_relaxed);
      }
    }
    ::closedir(d);
  });
  counters.orphans_removed.store(removed.load(), std::memory_order_relaxed);
}

Status Store::Impl::Recover() {
  uint64_t ckpt_gen = 0;
  auto ckpt = store_format::ReadCheckpoint(
      options.index_dir, [this](store_format::EntryRecord&& rec) { UpsertEntry(std::move(rec)); });
  if (ckpt.ok()) {
    ckpt_gen = *ckpt;
  } else if (ckpt.status().code() != Code::kNotFound) {
    GLOG_WARN("store: ignoring the index checkpoint ({}); starting from the journals",
              ckpt.status().ToString());
    for (Shard& shard : shards) {
      MutexLock lock(shard.mu);
      shard.map.clear();
    }
  }
  uint64_t next_gen = ckpt_gen;
  for (uint64_t gen : ListJournals(options.index_dir)) {
    next_gen = std::max(next_gen, gen + 1);
    if (gen < ckpt_gen) continue;
    std::string path = options.index_dir + "/" + store_format::JournalFileName(gen);
    auto replayed = store_format::ReplayJournal(
        path, [this](store_format::RecordType type, std::string_view payload) {
          ApplyRecord(type, payload);
        });
    if (!replayed.ok()) GLOG_WARN("store: skipping journal: {}", replayed.status().ToString());
  }
  MakeFilesPrivate(options.index_dir);
  ValidateFiles();
  RemoveOrphans();
  // A full disk does not refuse the store: it serves what it
  // holds and admits again once the index can be written.
  {
    MutexLock lock(journal_mu);
    auto created = store_format::Journal::Create(options.index_dir, next_gen);
    if (!created.ok() && created.status().code() == Code::kNoSpace) {
      reopen_generation = next_gen;
      GLOG_WARN("store: index dir {} is full: nothing is admitted until space frees up ({})",
                options.index_dir, created.status().ToString());
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(journal, std::move(created));
  }
  Status s = CheckpointLocked();
  if (s.code() == Code::kNoSpace) {
    GLOG_WARN("store: index dir {} is full: no checkpoint at open ({})", options.index_dir,
              s.ToString());
    return Status::Ok();
  }
  return s;
}

Store::Impl::~Impl() {
  for (int fd : lock_fds) ::close(fd);
}

Status Store::Impl::LockDir(const std::string& dir) {
  std::string path = dir + "/LOCK";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, kCacheFileMode);
  if (fd < 0) return ErrnoStatus("store: open " + path, errno);
  lock_fds.push_back(fd);
  struct stat st {};
  if (::fstat(fd, &st) == 0) RestrictMode(path, st, kCacheFileMode);  // an older, wider LOCK
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return Unavailable("store: " + dir + " is in use by another Granary store (" + path +
                       " is locked)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.index_dir.empty()) impl->options.index_dir = options.tiers[0].path;
  impl->clock = options.clock ? options.clock : Clock::Real();
  ASSIGN_OR_RETURN(impl->policy, MakeCachePolicy(options.policy));
  impl->shards = std::vector<Shard>(static_cast<size_t>(options.index_shards));
  for (const TierLevel& level : options.tiers) {
    RETURN_IF_ERROR(MakeDirs(level.path));
    RETURN_IF_ERROR(MakePrivateDir(level.path));
    SpreadSubdirectories(level.path);
    for (int sub = 0; sub < 256; ++sub) {
      char name[3];
      std::snprintf(name, sizeof(name), "%02x", sub);
      RETURN_IF_ERROR(MakePrivateDir(level.path + "/" + name));
    }
    auto tier = std::make_unique<TierState>();
    tier->level = level;
    impl->tiers.push_back(std::move(tier));
  }
  RETURN_IF_ERROR(MakeDirs(impl->options.index_dir));
  RETURN_IF_ERROR(MakePrivateDir(impl->options.index_dir));
  // One store per directory: a second one would delete the first one's files
  // as orphans.
  std::vector<std::string> lock_dirs{impl->options.index_dir};
  for (const TierLevel& level : options.tiers) {
    if (level.path != impl->options.index_dir) lock_dirs.push_back(level.path);
  }
  for (const std::string& dir : lock_dirs) RETURN_IF_ERROR(impl->LockDir(dir));
  // After the locks: no earlier store writes into these directories from now on.
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  impl->opened_realtime_ns = int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  RETURN_IF_ERROR(impl->Recover());
  Impl* raw = impl.get();
  std::unique_ptr<Store> store(new Store(std::move(impl)));
  if (options.background) raw->bg_thread = std::thread([raw] { raw->BackgroundLoop(); });
  return store;
}

}  // namespace granary
