#include "cache/engine.h"

#include <algorithm>
#include <cstring>

#include "cache/engine_internal.h"
#include "common/clock.h"
#include "common/log.h"

namespace granary {

Status EngineOptions::Validate() const {
  if (dataset.empty()) return InvalidArgument("engine: dataset name is empty");
  if (origin_concurrency < 1) {
    return InvalidArgument("engine: origin_concurrency " + std::to_string(origin_concurrency) +
                           " must be at least 1");
  }
  if (readahead_blocks < 0) return InvalidArgument("engine: readahead_blocks must not be negative");
  if (admission_threads < 1) return InvalidArgument("engine: admission_threads must be at least 1");
  if (admission_queue_blocks < 0) {
    return InvalidArgument("engine: admission_queue_blocks must not be negative");
  }
  if (origin_timeout.count() < 1) {
    return InvalidArgument("engine: origin_timeout must be positive");
  }
  return Status::Ok();
}

CacheEngine::CacheEngine(std::shared_ptr<UnderStorage> ufs,
                         std::shared_ptr<const Snapshot> snapshot, Store* store,
                         EngineOptions options)
    : snapshot_(std::move(snapshot)),
      store_(store),
      options_(std::move(options)),
      block_size_(store->block_size()),
      origin_(std::make_unique<OriginSource>(std::move(ufs), options_.origin_concurrency)),
      readahead_(ReadaheadOptions{.max_blocks = options_.readahead_blocks}),
      fetchers_(std::make_unique<ElasticPool>(SIZE_MAX, "granary-fetch")),
      admission_pool_(std::make_unique<ThreadPool>(options_.admission_threads, "granary-admit")) {}

CacheEngine::~CacheEngine() {
  // SetCluster's oracles call the cluster node, which asks this engine its
  // block size: the store must not call them once the engine is gone.
  if (cluster_) store_->SetOwnershipOracle(nullptr);
  Shutdown();
  {
    // Calls still inside (their waits were just cancelled) return first.
    MutexLock lock(calls_mu_);
    calls_cv_.Wait(lock, [this]() REQUIRES(calls_mu_) { return calls_ == 0; });
  }
  admission_pool_.reset();
}

void CacheEngine::Shutdown() {
  shutdown_.Cancel();
  fetchers_->Stop();
}

void CacheEngine::SetCluster(std::shared_ptr<ClusterSource> cluster) {
  cluster_ = std::move(cluster);
  if (!cluster_) {
    store_->SetOwnershipOracle(nullptr);
    return;
  }
  ClusterSource* c = cluster_.get();
  const uint64_t bs = block_size_;
  store_->SetOwnershipOracle(
      // A large object counts as owned when this node owns any of its blocks.
      [c, bs](const ObjectKey& key) {
        const uint64_t blocks = key.size <= bs ? 1 : (key.size + bs - 1) / bs;
        for (uint64_t b = 0; b < blocks; ++b) {
          if (c->Owns(key, b)) return true;
        }
        return false;
      },
      // Block-level owned bytes: the primary owner only, so the members' sum
      // counts a replicated block once.
      [c](const ObjectKey& key, uint64_t block) { return c->IsPrimary(key, block); });
}

ObjectKey CacheEngine::KeyOf(const Snapshot& snap, const EntryView& entry) const {
  return ObjectKey{.dataset = options_.dataset,
                   .key = snap.Key(entry.ino),
                   .etag = std::string(entry.etag),
                   .size = entry.size};
}

uint64_t CacheEngine::BlockCount(uint64_t size) const {
  return (size + block_size_ - 1) / block_size_;
}

CacheEngine::FlightKey CacheEngine::FlightKeyOf(const ObjectKey& key, uint64_t block) {
  const ObjectId id = IdOf(key);
  return FlightKey{.hi = id.hi, .lo = id.lo, .block = block};
}

std::optional<Result<size_t>> CacheEngine::ReadLocal(const SnapshotPtr& snap, uint64_t ino,
                                                     uint64_t offset, std::span<char> out) {
  CallGuard guard(this);
  auto entry = snap->Get(ino);
  if (!entry) return NotFound("inode " + std::to_string(ino) + ": no such file");
  if (entry->is_dir) return InvalidArgument(snap->Path(ino) + ": is a directory");
  if (offset >= entry->size || out.empty()) {
    c_.reads.fetch_add(1, std::memory_order_relaxed);
    return size_t{0};
  }
  const ObjectKey key = KeyOf(*snap, *entry);
  auto hit = ReadHit(snap, *entry, key, offset, out, /*count_miss=*/false);
  if (!hit) return std::nullopt;
  c_.reads.fetch_add(1, std::memory_order_relaxed);
  return *hit;
}

std::optional<size_t> CacheEngine::ReadHit(const SnapshotPtr& snap, const EntryView& entry,
                                           const ObjectKey& key, uint64_t offset,
                                           std::span<char> out, bool count_miss) {
  const size_t len = std::min<uint64_t>(out.size(), entry.size - offset);
  // A large object read through a mount that takes fetched blocks into its
  // page cache (a fresh mount over a warm cache): its stream's readahead
  // starts first, and a read of cached blocks being read ahead takes the
  // bytes of that read instead of reading the cache file again behind it.
  // Only cached blocks: the wait is then for the cache disk, never the
  // origin (ReadLocal runs on a FUSE transport thread), and a missed block
  // is fetched for its reader first, at its priority, before readahead.
  const bool streamed =
      fetched_hook_ && entry.size > block_size_ && store_->ContainsRange(key, offset, len);
  if (streamed) {
    MaybeReadahead(snap, entry, offset, offset + len);
    if (ReadFromFlights(key, offset, out.first(len))) {
      c_.hit_reads.fetch_add(1, std::memory_order_relaxed);
      c_.hit_bytes.fetch_add(len, std::memory_order_relaxed);
      return len;
    }
  }
  // The whole of `out`, not its first len bytes: the store may read a cold
  // range straight into it with O_DIRECT, rounded up past len (Store::Read).
  auto hit = store_->Read(key, offset, out, count_miss);
  if (!hit.ok() || *hit != len) return std::nullopt;
  c_.hit_reads.fetch_add(1, std::memory_order_relaxed);
  c_.hit_bytes.fetch_add(len, std::memory_order_relaxed);
  // A reader of blocks fetched ahead keeps its stream going.
  if (!streamed) MaybeReadahead(snap, entry, offset, offset + len);
  return len;
}

bool CacheEngine::ReadFromFlights(const ObjectKey& key, uint64_t offset, std::span<char> out) {
  const uint64_t first = offset / block_size_;
  const uint64_t last = (offset + out.size() - 1) / block_size_;
  std::vector<std::shared_ptr<Flight>> flights;
  {
    MutexLock lock(flights_mu_);
    for (uint64_t b = first; b <= last; ++b) {
      auto it = flights_.find(FlightKeyOf(key, b));
      if (it == flights_.end()) return false;
      flights.push_back(it->second);
    }
  }
  // The blocks are cached (the caller checked): the wait is for the cache
  // disk, bounded like a reader's wait all the same.
  const auto deadline = Clock::Real()->Now() + options_.origin_timeout;
  size_t done = 0;
  for (size_t i = 0; i < flights.size(); ++i) {
    Flight& f = *flights[i];
    const uint64_t block_start = (first + i) * block_size_;
    const uint64_t from = offset + done - block_start;
    MutexLock lock(f.mu);
    f.cv.WaitUntil(lock, deadline, [&]() REQUIRES(f.mu) { return f.data_ready; });
    if (!f.data_ready || !f.status.ok() || !f.data || f.data->size() <= from) return false;
    const size_t n = std::min<size_t>(out.size() - done, f.data->size() - from);
    std::memcpy(out.data() + done, f.data->data() + from, n);
    done += n;
  }
  return done == out.size();
}

Result<size_t> CacheEngine::Read(const SnapshotPtr& snap, uint64_t ino, uint64_t offset,
                                 std::span<char> out, Priority priority, CancelToken* cancel,
                                 bool* beyond_cache) {
  CallGuard guard(this);
  auto entry = snap->Get(ino);
  if (!entry) return NotFound("inode " + std::to_string(ino) + ": no such file");
  if (entry->is_dir) return InvalidArgument(snap->Path(ino) + ": is a directory");
  c_.reads.fetch_add(1, std::memory_order_relaxed);
  if (offset >= entry->size || out.empty()) return size_t{0};
  const size_t len = std::min<uint64_t>(out.size(), entry->size - offset);
  const ObjectKey key = KeyOf(*snap, *entry);
  if (auto hit = ReadHit(snap, *entry, key, offset, out, /*count_miss=*/true)) return *hit;
  c_.miss_reads.fetch_add(1, std::memory_order_relaxed);
  const Want want{.priority = priority, .snap = snap, .ino = ino, .cancel = cancel};
  size_t done = 0;
  while (done < len) {
    const uint64_t pos = offset + done;
    const uint64_t block = pos / block_size_;
    const uint64_t in_block = pos - block * block_size_;
    auto got = GetBlock(key, block, want);
    if (!got.ok()) {
      c_.read_errors.fetch_add(1, std::memory_order_relaxed);
      return got.status();
    }
    const BlockData& bytes = got->data;
    if (!got->from_store && beyond_cache != nullptr) *beyond_cache = true;
    if (in_block >= bytes->size()) break;  // cannot happen unless the origin shrank
    const size_t n = std::min<size_t>(len - done, bytes->size() - in_block);
    std::memcpy(out.data() + done, bytes->data() + in_block, n);
    done += n;
  }
  c_.miss_bytes.fetch_add(done, std::memory_order_relaxed);
  MaybeReadahead(snap, *entry, offset, offset + done);
  return done;
}

Result<bool> CacheEngine::Fetch(const SnapshotPtr& snap, uint64_t ino, Priority priority) {
  CallGuard guard(this);
  auto entry = snap->Get(ino);
  if (!entry) return NotFound("inode " + std::to_string(ino) + ": no such file");
  if (entry->is_dir) return InvalidArgument(snap->Path(ino) + ": is a directory");
  if (entry->size == 0) return true;
  const ObjectKey key = KeyOf(*snap, *entry);
  if (store_->Contains(key)) return true;
  if (cluster_ && entry->size <= block_size_ && !cluster_->Owns(key, 0)) {
    // Another node owns it: that node fetches and keeps it; nothing comes here.
    auto warmed = cluster_->WarmRemote(key);
    if (warmed.ok()) return *warmed;
    if (warmed.status().code() != Code::kNotFound) {
      GLOG_DEBUG("cache: remote warm-up of {} failed ({}); fetching it here", key.key,
                 warmed.status().ToString());
    }
  }
  return FetchKey(
      key, Want{.priority = priority,
                .wait_admission = true,
                .snap = snap,
                .ino = ino,
                // A warm-up (low priority: load, prefetch) runs its
                // own fetch; a reader waiting for a whole file (the
                // API's open of a cold file) keeps its origin_timeout.
                .run_here = priority == Priority::kLow && origin_->ufs().BoundsRequestTime()});
}

bool CacheEngine::PushCached(const SnapshotPtr& snap, uint64_t ino) {
  CallGuard guard(this);
  if (!fetched_hook_) return false;
  auto entry = snap->Get(ino);
  if (!entry || entry->is_dir || entry->size == 0) return false;
  const ObjectKey key = KeyOf(*snap, *entry);
  bool pushed = false;
  for (uint64_t b = 0; b < BlockCount(entry->size); ++b) {
    const FlightKey fk = FlightKeyOf(key, b);
    if (WasPushed(fk)) continue;
    const uint64_t start = b * block_size_;
    std::optional<BlockData> data =
        ReadStoredBlock(key, start, BlockLength(entry->size, b), /*count_miss=*/false);
    if (!data) break;  // evicted meanwhile
    if (!fetched_hook_(*snap, ino, start, (*data)->view())) break;
    NotePushed(fk);
    pushed = true;
  }
  return pushed;
}

std::optional<BlockData> CacheEngine::ReadStoredBlock(const ObjectKey& key, uint64_t offset,
                                                      uint64_t length, bool count_miss) {
  // Aligned and rounded up: a cold block is read from the disk straight
  // into it (Store::Read).
  auto buf = BlockBuffer::Allocate(length);
  auto r = store_->Read(key, offset, std::span<char>(buf->data(), buf->capacity()), count_miss);
  if (!r.ok() || *r != length) return std::nullopt;
  return BlockData(std::move(buf));
}

Result<bool> CacheEngine::FetchKey(const ObjectKey& key, const Want& want) {
  const uint64_t blocks = BlockCount(key.size);
  // A large object is warmed up like a sequential reader reads it: the next
  // readahead_blocks blocks are fetched while this one is (within the
  // readahead memory), so it loads at the pace of several GETs, not one.
  const uint64_t ahead = want.snap ? static_cast<uint64_t>(options_.readahead_blocks) : 0;
  uint64_t started = 1;
  for (uint64_t b = 0; b < blocks; ++b) {
    for (; started < std::min(blocks, b + 1 + ahead); ++started) {
      if (store_->ContainsRange(key, started * block_size_, BlockLength(key.size, started)))
        continue;
      if (!StartReadahead(want.snap, want.ino, key, started)) break;
    }
    if (store_->ContainsRange(key, b * block_size_, BlockLength(key.size, b))) continue;
    ASSIGN_OR_RETURN(Got got, GetBlock(key, b, want));
    // A block kept by its owner elsewhere counts as loaded (cluster warm-up).
    const bool elsewhere = cluster_ && !want.for_peer && !cluster_->Owns(key, b);
    if (!got.admitted && !elsewhere) return false;  // no room: fetching the rest would be wasted
  }
  return true;
}

bool CacheEngine::IsCached(const Snapshot& snap, uint64_t ino) const {
  auto entry = snap.Get(ino);
  if (!entry || entry->is_dir) return false;
  return entry->size == 0 || store_->Contains(KeyOf(snap, *entry));
}

Result<int> CacheEngine::OpenCachedFile(const Snapshot& snap, uint64_t ino) {
  auto entry = snap.Get(ino);
  if (!entry || entry->is_dir) return NotFound("inode " + std::to_string(ino) + ": no such file");
  return store_->OpenCompleteFile(KeyOf(snap, *entry));
}

Result<std::string> CacheEngine::CachedFilePath(const Snapshot& snap, uint64_t ino) {
  auto entry = snap.Get(ino);
  if (!entry || entry->is_dir) return NotFound("inode " + std::to_string(ino) + ": no such file");
  return store_->CompleteFilePath(KeyOf(snap, *entry));
}

Result<CacheEngine::Got> CacheEngine::GetBlock(const ObjectKey& key, uint64_t block,
                                               const Want& want) {
  const auto deadline = Clock::Real()->Now() + options_.origin_timeout;
  const FlightKey fk = FlightKeyOf(key, block);
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    MutexLock lock(flights_mu_);
    auto [it, inserted] = flights_.try_emplace(fk);
    if (inserted) it->second = std::make_shared<Flight>();
    flight = it->second;
    leader = inserted;
  }
  if (leader && want.run_here) {
    // A warm-up waits for the fetch and its admission whatever happens, has
    // nothing to interrupt it, and its origin ends every request on its own
    // timeouts: handing the fetch to a fetch thread and back would cost two
    // thread switches per block for nothing (8.2 -> 4.2 switches
    // and 0.48 -> 0.42 ms of daemon CPU per file of `granary load`).
    RunFetch(flight, key, block, want, fk, deadline);
  } else if (leader) {
    Want fetch_want = want;
    fetch_want.cancel = nullptr;  // the reader's, not the fetch's
    bool published = false;
    if (cluster_ && !want.for_peer && want.priority == Priority::kHigh &&
        !cluster_->Owns(key, block)) {
      // A block another node owns is asked of it on this thread: its bytes
      // reach this reader as they arrive, without a hop through a fetch
      // thread. The request is bounded by the peer timeout (an interrupt
      // waits for it); only the origin read, when no owner answers, goes to
      // a fetch thread.
      Want peer = fetch_want;
      peer.peer_only = true;
      published = RunFetch(flight, key, block, peer, fk, deadline, &fetch_want.origin_kind);
      fetch_want.skip_peer = true;
    }
    // The fetch runs on a fetch thread so that every reader, this one
    // included, can stop waiting (deadline, interrupt) while it goes on.
    if (!published && !fetchers_->TrySubmit([this, flight, key, block, fetch_want, fk, deadline] {
          RunFetch(flight, key, block, fetch_want, fk, deadline);
        })) {
      AbandonFlight(flight, fk, Cancelled("cache engine shutting down: " + key.key));
    }
  } else {
    c_.flight_joins.fetch_add(1, std::memory_order_relaxed);
  }
  return AwaitFlight(flight, key, block, want, deadline);
}

void CacheEngine::AbandonFlight(const std::shared_ptr<Flight>& flight, const FlightKey& fk,
                                Status status) {
  {
    MutexLock lock(flights_mu_);
    flights_.erase(fk);
  }
  {
    MutexLock lock(flight->mu);
    flight->data_ready = true;
    flight->admit_done = true;
    flight->status = std::move(status);
  }
  flight->cv.NotifyAll();
}

namespace {
std::string Seconds(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}
}  // namespace

Result<CacheEngine::Got> CacheEngine::AwaitFlight(const std::shared_ptr<Flight>& flight,
                                                  const ObjectKey& key, uint64_t block,
                                                  const Want& want,
                                                  std::chrono::steady_clock::time_point deadline) {
  auto wake = [flight] {
    { MutexLock lock(flight->mu); }
    flight->cv.NotifyAll();
  };
  // Declared before the lock: unregistered after it is released (cancel.h).
  CancelToken::Wake on_cancel(want.cancel, wake);
  CancelToken::Wake on_shutdown(&shutdown_, wake);
  auto cancelled = [&] {
    return (want.cancel != nullptr && want.cancel->cancelled()) || shutdown_.cancelled();
  };
  MutexLock lock(flight->mu);
  flight->cv.WaitUntil(lock, deadline,
                       [&]() REQUIRES(flight->mu) { return flight->data_ready || cancelled(); });
  if (!flight->data_ready) {
    c_.read_waits_ended.fetch_add(1, std::memory_order_relaxed);
    const std::string what = key.key + " block " + std::to_string(block);
    if (want.cancel != nullptr && want.cancel->cancelled()) {
      return Cancelled("read interrupted while waiting for " + what);
    }
    if (shutdown_.cancelled()) return Cancelled("cache engine shutting down: " + what);
    return Unavailable("origin did not answer within " + Seconds(options_.origin_timeout) + ": " +
                       what);
  }
  if (!flight->status.ok()) return flight->status;
  Got got{.data = flight->data, .from_store = flight->from_store};
  if (want.wait_admission) {
    flight->cv.Wait(lock, [&]() REQUIRES(flight->mu) { return flight->admit_done; });
    got.admitted = flight->admitted;
  }
  return got;
}

bool CacheEngine::RunFetch(const std::shared_ptr<Flight>& flight, const ObjectKey& key,
                           uint64_t block, const Want& want, const FlightKey& fk,
                           std::chrono::steady_clock::time_point deadline, AdmitKind* origin_kind) {
  const uint64_t start = block * block_size_;
  const BlockRef ref{
      .key = key, .block = block, .offset = start, .length = BlockLength(key.size, block)};
  AdmitKind kind = AdmitKind::kOwned;
  bool from_store = false;
  Result<BlockData> data = FetchFromSources(ref, want, &kind, &from_store, deadline);
  if (want.peer_only && !data.ok() && data.status().code() == Code::kNotFound) {
    if (origin_kind != nullptr) *origin_kind = kind;
    return false;  // no owner answered: the origin's turn, on a fetch thread
  }
  const bool done = !data.ok() || from_store;
  // A block read ahead from the local store to be pushed into the mount's
  // page cache stays in the map until it is: a READ of its range meanwhile
  // takes these bytes (ReadFromFlights) instead of reading the file again.
  const bool push_from_store =
      data.ok() && from_store && want.priority == Priority::kLow && fetched_hook_ && want.snap;
  if (done && !push_from_store) {
    // Leave the single-flight map before the result is published: a read
    // that starts after this fetch failed must start a new fetch, never
    // join this finished one and get its stale error.
    MutexLock lock(flights_mu_);
    flights_.erase(fk);
  }
  {
    MutexLock lock(flight->mu);
    flight->data_ready = true;
    flight->status = data.status();
    flight->from_store = from_store;
    if (data.ok()) flight->data = *data;
    if (done) {
      flight->admit_done = true;
      flight->admitted = from_store;
    }
  }
  flight->cv.NotifyAll();
  if (done) {
    // A block read ahead from the local store (a fresh mount over a warm
    // cache) goes to the mount's page cache like one from the origin: the
    // reader then finds it there, and the cache file is read once, in
    // whole blocks, ahead of it.
    if (push_from_store) {
      if (fetched_hook_(*want.snap, want.ino, start, (*data)->view())) NotePushed(fk);
      MutexLock lock(flights_mu_);
      flights_.erase(fk);
    }
    return true;
  }
  // A demand read hands these bytes to its reader right away; warm-up and
  // readahead (low priority) fetch them for a reader still to come,
  // unless the hook hands them over now.
  bool served = want.priority == Priority::kHigh;
  if (!served && fetched_hook_ && want.snap &&
      fetched_hook_(*want.snap, want.ino, start, (*data)->view())) {
    served = true;
    NotePushed(fk);
  }
  if (want.wait_admission) {
    Admit(flight, key, block, *data, fk, served, kind, want);
  } else {
    QueueAdmission(flight, key, block, *data, fk, served, kind, want);
  }
  return true;
}

Result<BlockData> CacheEngine::FetchFromSources(const BlockRef& ref, const Want& want,
                                                AdmitKind* kind, bool* from_store,
                                                std::chrono::steady_clock::time_point deadline) {
  // The local store: the block may have been admitted since the caller missed.
  if (store_->ContainsRange(ref.key, ref.offset, ref.length)) {
    if (std::optional<BlockData> data = ReadStoredBlock(ref.key, ref.offset, ref.length)) {
      *from_store = true;
      return std::move(*data);
    }
  }
  // The owner peer; a block this node does not own is kept only as a near copy.
  if (want.peer_only ||
      (cluster_ && !want.for_peer && !want.skip_peer && !cluster_->Owns(ref.key, ref.block))) {
    bool next_in_line = false;
    auto r = cluster_->ReadFromOwner(ref, want.priority, &next_in_line);
    *kind = next_in_line ? AdmitKind::kOwned : AdmitKind::kNear;
    if (r.ok() && (*r)->size() == ref.length) {
      c_.peer_blocks.fetch_add(1, std::memory_order_relaxed);
      c_.peer_bytes.fetch_add(ref.length, std::memory_order_relaxed);
      return r;
    }
    c_.peer_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (!r.ok() && r.status().code() != Code::kNotFound) {
      GLOG_DEBUG("cache: {} block {} from the cluster: {}; reading the origin", ref.key.key,
                 ref.block, r.status().ToString());
    }
    if (want.peer_only) return NotFound("no owner of " + ref.key.key + " answered");
  }
  if (want.skip_peer) *kind = want.origin_kind;
  // A block this node owns (or a peer asked it for) may still be held by its
  // owner before a membership change: a handover asks there before the
  // origin (the cluster answers at once when no handover is in progress).
  if (cluster_ && !want.skip_peer) {
    auto r = cluster_->ReadFromPrevious(ref, want.priority);
    if (r.ok() && (*r)->size() == ref.length) return r;
  }
  return origin_->ReadBlockUntil(ref, want.priority, deadline, &shutdown_);
}

void CacheEngine::PushNotKept(const Want& want, uint64_t block, const BlockData& data,
                              const FlightKey& fk) {
  if (!fetched_hook_ || !want.snap) return;
  fetchers_->TrySubmit(
      [this, snap = want.snap, ino = want.ino, start = block * block_size_, data, fk] {
        if (fetched_hook_(*snap, ino, start, data->view())) NotePushed(fk);
      });
}

void CacheEngine::Admit(const std::shared_ptr<Flight>& flight, const ObjectKey& key, uint64_t block,
                        const BlockData& data, const FlightKey& fk, bool served, AdmitKind kind,
                        const Want& want) {
  auto r = store_->AdmitBlock(key, block, data->view(), served, kind, data->xxh3());
  bool ok = r.ok() && *r;
  if (!ok && kind == AdmitKind::kNear) PushNotKept(want, block, data, fk);
  if (!r.ok()) {
    c_.admit_errors.fetch_add(1, std::memory_order_relaxed);
    GLOG_WARN("cache: admitting {} block {} failed: {}", key.key, block, r.status().ToString());
  } else if (*r) {
    c_.admitted.fetch_add(1, std::memory_order_relaxed);
    if (kind == AdmitKind::kNear) c_.near_admitted.fetch_add(1, std::memory_order_relaxed);
  } else {
    c_.not_admitted.fetch_add(1, std::memory_order_relaxed);
  }
  FinishAdmission(flight, fk, ok);
}

void CacheEngine::FinishAdmission(const std::shared_ptr<Flight>& flight, const FlightKey& fk,
                                  bool admitted) {
  {
    MutexLock lock(flight->mu);
    flight->admit_done = true;
    flight->admitted = admitted;
  }
  flight->cv.NotifyAll();
  MutexLock lock(flights_mu_);
  auto it = flights_.find(fk);
  if (it != flights_.end() && it->second == flight) flights_.erase(it);
}

void CacheEngine::QueueAdmission(const std::shared_ptr<Flight>& flight, const ObjectKey& key,
                                 uint64_t block, const BlockData& data, const FlightKey& fk,
                                 bool served, AdmitKind kind, const Want& want) {
  const uint64_t bytes = data->size();
  const uint64_t cap = options_.admission_queue_bytes;
  const int cap_blocks = options_.admission_queue_blocks;
  {
    // The cache disk is behind: this fetch waits (its readers have the bytes
    // already), and so does the readahead that would start after it. One
    // block always fits, however large.
    MutexLock lock(admission_mu_);
    auto room = [&]() REQUIRES(admission_mu_) {
      const uint64_t pending = admission_pending_bytes_.load(std::memory_order_relaxed);
      return admission_pending_blocks_ == 0 ||
             ((cap == 0 || pending + bytes <= cap) &&
              (cap_blocks == 0 || admission_pending_blocks_ < cap_blocks));
    };
    if (!room() && kind == AdmitKind::kNear) {
      // A near copy is optional (its owner keeps the block): under
      // back-pressure it is not kept, and its reader -- who may be the FUSE
      // thread that received it -- does not wait.
      lock.Unlock();
      c_.not_admitted.fetch_add(1, std::memory_order_relaxed);
      PushNotKept(want, block, data, fk);
      FinishAdmission(flight, fk, false);
      return;
    }
    if (!room()) {
      c_.admission_waits.fetch_add(1, std::memory_order_relaxed);
      admission_cv_.Wait(lock, room);
    }
    admission_pending_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    ++admission_pending_blocks_;
  }
  admission_pool_->Submit([this, flight, key, block, data, fk, served, kind, bytes, want] {
    Admit(flight, key, block, data, fk, served, kind, want);
    {
      MutexLock lock(admission_mu_);
      admission_pending_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
      --admission_pending_blocks_;
    }
    admission_cv_.NotifyAll();
  });
}

void CacheEngine::MaybeReadahead(const SnapshotPtr& snap, const EntryView& e, uint64_t offset,
                                 uint64_t end) {
  if (options_.readahead_blocks == 0 || e.size <= block_size_) return;
  const uint64_t vino = VersionedIno(*snap, e.ino);
  const ReadaheadWindows::Range range = readahead_.OnRead(vino, offset, end, e.size, block_size_);
  if (range.empty()) return;
  const ObjectKey key = KeyOf(*snap, e);
  for (uint64_t b = range.first; b < range.last; ++b) {
    // A cached block is read ahead too when the mount takes fetched bytes
    // into its page cache (the fetched hook): from the store, in one piece.
    if (store_->ContainsRange(key, b * block_size_, BlockLength(e.size, b)) &&
        (!fetched_hook_ || WasPushed(FlightKeyOf(key, b)))) {
      continue;
    }
    if (!StartReadahead(snap, e.ino, key, b)) {
      // Readahead memory is spent: this stream looks less far ahead, and asks
      // again for the blocks from here on at its next read.
      c_.readahead_dropped.fetch_add(1, std::memory_order_relaxed);
      readahead_.Shrink(vino, end, b, block_size_);
      break;
    }
  }
}

void CacheEngine::NotePushed(const FlightKey& fk) {
  MutexLock lock(pushed_mu_);
  if (pushed_.size() >= kPushedBlocksRemembered) pushed_.clear();  // forgetting costs one re-read
  pushed_.insert(fk);
}

bool CacheEngine::WasPushed(const FlightKey& fk) {
  MutexLock lock(pushed_mu_);
  return pushed_.count(fk) != 0;
}

bool CacheEngine::StartReadahead(const SnapshotPtr& snap, uint64_t ino, const ObjectKey& key,
                                 uint64_t block) {
  const uint64_t len = BlockLength(key.size, block);
  const FlightKey fk = FlightKeyOf(key, block);
  auto flight = std::make_shared<Flight>();
  {
    MutexLock lock(flights_mu_);
    if (flights_.count(fk)) return true;  // a reader or an earlier readahead fetches it
    const uint64_t cap = options_.readahead_memory_bytes;
    const uint64_t now = readahead_bytes_.load(std::memory_order_relaxed);
    if (cap != 0 && now > 0 && now + len > cap) return false;
    readahead_bytes_.fetch_add(len, std::memory_order_relaxed);
    flights_.emplace(fk, flight);
  }
  c_.readahead_started.fetch_add(1, std::memory_order_relaxed);
  const auto deadline = Clock::Real()->Now() + options_.origin_timeout;
  // The task holds `snap`: the fetched hook's inode refers to it.
  const Want want{.priority = Priority::kLow, .snap = snap, .ino = ino};
  const bool started = fetchers_->TrySubmit([this, flight, key, block, want, fk, deadline, len] {
    RunFetch(flight, key, block, want, fk, deadline);
    readahead_bytes_.fetch_sub(len, std::memory_order_relaxed);
  });
  if (!started) {
    readahead_bytes_.fetch_sub(len, std::memory_order_relaxed);
    AbandonFlight(flight, fk, Cancelled("cache engine shutting down: " + key.key));
  }
  return true;
}

EngineStats CacheEngine::stats() const {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const SnapshotPtr snap = snapshot();
  const OriginStats o = origin_->stats();
  return EngineStats{
      .ufs_files = snap->file_count(),
      .ufs_bytes = snap->total_bytes(),
      .reads = ld(c_.reads),
      .hit_reads = ld(c_.hit_reads),
      .miss_reads = ld(c_.miss_reads),
      .hit_bytes = ld(c_.hit_bytes),
      .miss_bytes = ld(c_.miss_bytes),
      .read_errors = ld(c_.read_errors),
      .read_waits_ended = ld(c_.read_waits_ended),
      .origin_requests = o.requests,
      .origin_bytes = o.bytes,
      .origin_errors = o.errors,
      .flight_joins = ld(c_.flight_joins),
      .admitted = ld(c_.admitted),
      .not_admitted = ld(c_.not_admitted),
      .admit_errors = ld(c_.admit_errors),
      .admission_waits = ld(c_.admission_waits),
      .admission_pending_bytes = admission_pending_bytes_.load(std::memory_order_relaxed),
      .readahead_started = ld(c_.readahead_started),
      .readahead_dropped = ld(c_.readahead_dropped),
      .readahead_pending_bytes = readahead_bytes_.load(std::memory_order_relaxed),
      .near_admitted = ld(c_.near_admitted),
      .peer_blocks = ld(c_.peer_blocks),
      .peer_bytes = ld(c_.peer_bytes),
      .peer_fallbacks = ld(c_.peer_fallbacks),
      .served_blocks = ld(c_.served_blocks),
      .served_hits = ld(c_.served_hits),
      .served_bytes = ld(c_.served_bytes),
      .served_errors = ld(c_.served_errors),
      .origin_latency_buckets = o.latency_buckets,
      .origin_latency_sum_s = o.latency_sum_s,
      .origin_errors_by_code = o.errors_by_code,
  };
}

}  // namespace granary
