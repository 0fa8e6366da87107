// Store maintenance: watermark eviction with demotion, index checkpoints and
// the background thread. All of it runs under Impl::maintenance_mu, so at most
// one pass runs at a time; it takes shard locks one at a time and never blocks
// readers for longer than one entry's retirement.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/file_modes.h"
#include "common/log.h"
#include "common/mutex.h"
#include "store/store.h"
#include "store/store_impl.h"

namespace granary {

void Store::Impl::EvictOnce() {
  for (uint32_t t = 0; t < tiers.size(); ++t) {
    TierState& tier = *tiers[t];
    uint64_t pressure = tier.pressure.exchange(0, std::memory_order_relaxed);
    uint64_t used = tier.used.load(std::memory_order_relaxed);
    uint64_t high = static_cast<uint64_t>(tier.level.high * tier.level.quota);
    uint64_t low = static_cast<uint64_t>(tier.level.low * tier.level.quota);
    uint64_t target = used > high ? low : used;
    if (pressure > 0) target = std::min(target, used > pressure ? used - pressure : 0);
    if (target < used) EvictTier(t, target);
  }
}

void Store::Impl::EvictTier(uint32_t t, uint64_t target) {
  std::vector<std::shared_ptr<Entry>> entries;
  std::vector<EvictionCandidate> candidates;
  for (Shard& shard : shards) {
    MutexLock lock(shard.mu);
    for (const auto& [id, e] : shard.map) {
      if (e->tier != t || e->allocated == 0) continue;  // empty: a writer is filling it
      candidates.push_back({.last_use = e->last_use.load(std::memory_order_relaxed),
                            .bytes = e->allocated,
                            .handle = entries.size()});
      entries.push_back(e);
    }
  }
  policy->RankVictims(candidates);
  // Near copies (objects another cluster node owns) go first; the key is
  // immutable, so the oracle runs without the shard lock.
  std::vector<char> owned(entries.size(), 1);
  if (std::shared_ptr<const OwnershipOracle> oracle = ownership.load(); oracle && *oracle) {
    for (size_t i = 0; i < entries.size(); ++i) owned[i] = (*oracle)(entries[i]->key);
    std::stable_partition(candidates.begin(), candidates.end(),
                          [&](const EvictionCandidate& c) { return !owned[c.handle]; });
  }
  TierState& tier = *tiers[t];
  for (const EvictionCandidate& c : candidates) {
    if (tier.used.load(std::memory_order_relaxed) <= target) break;
    const std::shared_ptr<Entry>& e = entries[c.handle];
    if (t + 1 < tiers.size() && Demote(e, t + 1)) {
      counters.demotions.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    Shard& shard = ShardOf(e->id);
    MutexLock lock(shard.mu);
    auto it = shard.map.find(e->id);
    if (it == shard.map.end() || it->second != e || e->tier != t) continue;
    DropLocked(shard, e);
    counters.evictions.fetch_add(1, std::memory_order_relaxed);
    if (!owned[c.handle]) counters.near_evictions.fetch_add(1, std::memory_order_relaxed);
  }
}

namespace {

// Copies [offset, offset + len) from one fd to another at the same offset.
int CopyRange(int from, int to, uint64_t offset, uint64_t len, std::string& buf) {
  buf.resize(len);
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(from, buf.data() + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? EIO : errno;
    done += static_cast<uint64_t>(n);
  }
  done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(to, buf.data() + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? EIO : errno;
    done += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace

int Store::Impl::CopyPresentBlocks(const Entry& e, const std::vector<uint64_t>& present,
                                   const std::string& src, const std::string& dst) {
  int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  int out =
      ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kCacheFileMode);
  int err = in < 0 || out < 0 ? errno : 0;
  if (err == 0 && ::ftruncate(out, static_cast<off_t>(e.key.size)) != 0) err = errno;
  std::string buf;
  for (uint64_t b = 0; err == 0 && b < e.blocks; ++b) {
    if (Entry::Bit(present, b)) {
      err = CopyRange(in, out, b * options.block_size, BlockLength(e.key, b), buf);
    }
  }
  if (in >= 0) ::close(in);
  if (out >= 0 && ::close(out) != 0 && err == 0) err = errno;
  return err;
}

bool Store::Impl::Demote(const std::shared_ptr<Entry>& e, uint32_t to) {
  // The copy gets a new ctime, which readers outside the store take for
  // "verified" (Store::FileLayout): a small object recovered and not read
  // since is verified first (a failure drops it).
  if (e->blocks == 1 && !VerifyBlocks(e, 0, 0)) return false;
  Shard& shard = ShardOf(e->id);
  uint32_t from;
  uint64_t generation, present_count, alloc;
  std::vector<uint64_t> present;
  {
    MutexLock lock(shard.mu);
    auto it = shard.map.find(e->id);
    if (it == shard.map.end() || it->second != e || e->tier >= to) return false;
    from = e->tier;
    generation = e->generation;
    present_count = e->present_count;
    present = e->present.ToVector();
    alloc = e->allocated;
  }
  if (!tiers[to]->Reserve(alloc)) return false;
  std::string src = FilePath(from, e->id);
  std::string dst = FilePath(to, e->id);
  std::string tmp = dst + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(tmp_seq.fetch_add(1, std::memory_order_relaxed));
  int err = CopyPresentBlocks(*e, present, src, tmp);
  MutexLock lock(shard.mu);
  auto it = shard.map.find(e->id);
  bool same = it != shard.map.end() && it->second == e && e->generation == generation &&
              e->present_count == present_count;
  if (err != 0 || !same || ::rename(tmp.c_str(), dst.c_str()) != 0) {
    if (err == ENOSPC || err == EDQUOT) {
      tiers[to]->pressure.fetch_add(alloc, std::memory_order_relaxed);
    }
    ::unlink(tmp.c_str());
    tiers[to]->Release(alloc);
    return false;
  }
  e->tier = to;
  e->generation++;
  Status s =
      AppendJournal(store_format::RecordType::kEntry, store_format::EncodeEntry(ToRecord(*e)));
  if (!s.ok()) {
    // Safe: recovery finds no file in the old tier and drops the entry.
    GLOG_WARN("store: journaling the demotion of {}: {}", HexName(e->id), s.ToString());
  }
  if (::unlink(src.c_str()) != 0 && errno != ENOENT) {
    GLOG_WARN("store: unlink {}: {}", src, std::strerror(errno));
  }
  tiers[from]->Release(alloc);
  tiers[from]->files.fetch_sub(1, std::memory_order_relaxed);
  tiers[to]->files.fetch_add(1, std::memory_order_relaxed);
  return true;
}

namespace {

// Deletes journal files of generations below `keep_from` in `dir`.
void DeleteOldJournals(const std::string& dir, uint64_t keep_from) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name.rfind("journal-", 0) != 0 || name.size() != 8 + 16) continue;
    uint64_t gen = std::strtoull(name.c_str() + 8, nullptr, 16);
    if (gen < keep_from) ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

}  // namespace

Status Store::Impl::CheckpointLocked() {
  // 1. New mutations go to a fresh journal from here on.
  uint64_t generation;
  {
    MutexLock lock(journal_mu);
    generation = (journal ? journal->generation() : reopen_generation) + 1;
    ASSIGN_OR_RETURN(auto fresh, store_format::Journal::Create(options.index_dir, generation));
    journal = std::move(fresh);
  }
  // 2. Snapshot every shard (each one locked briefly) into the checkpoint.
  // It may already include some mutations of the new journal; replaying them
  // again is harmless because every record is an upsert or a removal.
  size_t shard_index = 0;
  std::vector<store_format::EntryRecord> batch;
  size_t batch_pos = 0;
  auto next = [&](store_format::EntryRecord& out) {
    while (batch_pos == batch.size()) {
      if (shard_index == shards.size()) return false;
      batch.clear();
      batch_pos = 0;
      Shard& shard = shards[shard_index++];
      MutexLock lock(shard.mu);
      for (const auto& [id, e] : shard.map) {
        if (e->present_count > 0) batch.push_back(ToRecord(*e));
      }
    }
    out = std::move(batch[batch_pos++]);
    return true;
  };
  RETURN_IF_ERROR(
      store_format::WriteCheckpoint(options.index_dir, generation, clock->WallNanos(), next));
  // 3. Older journals are covered by the checkpoint now.
  DeleteOldJournals(options.index_dir, generation);
  return Status::Ok();
}

void Store::Impl::BackgroundLoop() {
  MutexLock lock(bg_mu);
  while (!bg_stop) {
    bg_cv.WaitFor(lock, options.eviction_interval);
    if (bg_stop) break;
    lock.Unlock();
    {
      MutexLock m(maintenance_mu);
      EvictOnce();
      uint64_t records;
      {
        MutexLock j(journal_mu);
        records = journal ? journal->records() : 0;
      }
      if (records >= options.checkpoint_every_records) {
        Status s = CheckpointLocked();
        if (!s.ok()) GLOG_WARN("store: periodic checkpoint failed: {}", s.ToString());
      }
    }
    lock.Lock();
  }
}

}  // namespace granary
