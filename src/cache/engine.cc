#include "cache/engine.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"

namespace granary {

// One in-progress fetch of one block. Lives in flights_ from the moment its
// leader registers it until its bytes have been offered to the store, so
// readers arriving meanwhile share the bytes instead of fetching again.
struct CacheEngine::Flight {
  std::mutex mu;  // guards everything below
  std::condition_variable cv;
  bool data_ready = false;
  Status status;     // the fetch's outcome, once data_ready
  BlockData data;    // the block's bytes, once data_ready and status.ok()
  bool admit_done = false;
  bool admitted = false;  // the store holds the block (admitted now, or already had it)
};

Status EngineOptions::Validate() const {
  if (dataset.empty()) return InvalidArgument("engine: dataset name is empty");
  if (origin_concurrency < 1) {
    return InvalidArgument("engine: origin_concurrency " + std::to_string(origin_concurrency) +
                           " must be at least 1");
  }
  if (readahead_blocks < 0) return InvalidArgument("engine: readahead_blocks must not be negative");
  if (admission_threads < 1) return InvalidArgument("engine: admission_threads must be at least 1");
  return Status::Ok();
}

CacheEngine::CacheEngine(std::shared_ptr<UnderStorage> ufs, std::shared_ptr<const Snapshot> snapshot,
                         Store* store, EngineOptions options)
    : ufs_(std::move(ufs)),
      snapshot_(std::move(snapshot)),
      store_(store),
      options_(std::move(options)),
      block_size_(store->block_size()),
      origin_slots_(options_.origin_concurrency),
      admission_pool_(std::make_unique<ThreadPool>(options_.admission_threads, "granary-admit")),
      readahead_pool_(std::make_unique<ThreadPool>(2, "granary-ahead")) {}

CacheEngine::~CacheEngine() {
  readahead_pool_.reset();
  admission_pool_.reset();
}

ObjectKey CacheEngine::KeyOf(const Snapshot& snap, const EntryView& entry) const {
  return ObjectKey{.dataset = options_.dataset,
                   .key = snap.Key(entry.ino),
                   .etag = std::string(entry.etag),
                   .size = entry.size};
}

uint64_t CacheEngine::BlockCount(uint64_t size) const { return (size + block_size_ - 1) / block_size_; }

Result<size_t> CacheEngine::Read(const SnapshotPtr& snap, uint64_t ino, uint64_t offset,
                                 std::span<char> out, Priority priority) {
  auto entry = snap->Get(ino);
  if (!entry) return NotFound("inode " + std::to_string(ino) + ": no such file");
  if (entry->is_dir) return InvalidArgument(snap->Path(ino) + ": is a directory");
  c_.reads.fetch_add(1, std::memory_order_relaxed);
  if (offset >= entry->size || out.empty()) return size_t{0};
  const size_t len = std::min<uint64_t>(out.size(), entry->size - offset);
  const ObjectKey key = KeyOf(*snap, *entry);

  auto hit = store_->Read(key, offset, out.first(len));
  if (hit.ok() && *hit == len) {
    c_.hit_reads.fetch_add(1, std::memory_order_relaxed);
    c_.hit_bytes.fetch_add(len, std::memory_order_relaxed);
    return len;
  }
  c_.miss_reads.fetch_add(1, std::memory_order_relaxed);
  size_t done = 0;
  while (done < len) {
    const uint64_t pos = offset + done;
    const uint64_t block = pos / block_size_;
    const uint64_t in_block = pos - block * block_size_;
    auto data = GetBlock(*snap, *entry, block, priority, /*wait_admission=*/false, nullptr);
    if (!data.ok()) {
      c_.read_errors.fetch_add(1, std::memory_order_relaxed);
      return data.status();
    }
    const BlockData& bytes = *data;
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
  auto entry = snap->Get(ino);
  if (!entry) return NotFound("inode " + std::to_string(ino) + ": no such file");
  if (entry->is_dir) return InvalidArgument(snap->Path(ino) + ": is a directory");
  if (entry->size == 0) return true;
  const ObjectKey key = KeyOf(*snap, *entry);
  if (store_->Contains(key)) return true;
  const uint64_t blocks = BlockCount(entry->size);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t start = b * block_size_;
    if (store_->ContainsRange(key, start, std::min(block_size_, entry->size - start))) continue;
    bool admitted = false;
    auto data = GetBlock(*snap, *entry, b, priority, /*wait_admission=*/true, &admitted);
    if (!data.ok()) return data.status();
    if (!admitted) return false;  // no room: fetching the rest would be wasted
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

Result<CacheEngine::BlockData> CacheEngine::GetBlock(const Snapshot& snap, const EntryView& e,
                                                     uint64_t block, Priority p,
                                                     bool wait_admission, bool* admitted) {
  const FlightKey fk{VersionedIno(snap, e.ino), block};
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    std::lock_guard lock(flights_mu_);
    auto [it, inserted] = flights_.try_emplace(fk);
    if (inserted) it->second = std::make_shared<Flight>();
    flight = it->second;
    leader = inserted;
  }
  if (leader) {
    const ObjectKey key = KeyOf(snap, e);
    bool from_store = false;
    // The block may have been admitted between the caller's miss and now.
    const uint64_t start = block * block_size_;
    const uint64_t len = std::min(block_size_, e.size - start);
    Result<BlockData> data = Status(Code::kInternal, "unset");
    if (store_->ContainsRange(key, start, len)) {
      std::string buf(len, '\0');
      auto r = store_->Read(key, start, std::span<char>(buf.data(), buf.size()));
      if (r.ok() && *r == len) {
        data = BlockData(std::make_shared<const std::string>(std::move(buf)));
        from_store = true;
      }
    }
    if (!from_store) data = FetchBlock(e, key, block, p);
    {
      std::lock_guard lock(flight->mu);
      flight->data_ready = true;
      flight->status = data.status();
      if (data.ok()) flight->data = *data;
    }
    flight->cv.notify_all();
    if (!data.ok() || from_store) {
      {
        std::lock_guard lock(flight->mu);
        flight->admit_done = true;
        flight->admitted = from_store;
      }
      flight->cv.notify_all();
      std::lock_guard lock(flights_mu_);
      flights_.erase(fk);
    } else {
      // A demand read hands these bytes to its reader right away; warm-up and
      // readahead (low priority) fetch them for a reader still to come,
      // unless the hook hands them over now.
      bool served = p == Priority::kHigh;
      if (!served && fetched_hook_) served = fetched_hook_(snap, e.ino, start, **data);
      if (wait_admission) {
        Admit(flight, key, block, *data, fk, served);
      } else {
        admission_pool_->Submit([this, flight, key, block, d = *data, fk, served] {
          Admit(flight, key, block, d, fk, served);
        });
      }
    }
  } else {
    c_.flight_joins.fetch_add(1, std::memory_order_relaxed);
  }
  std::unique_lock lock(flight->mu);
  flight->cv.wait(lock, [&] { return flight->data_ready; });
  if (!flight->status.ok()) return flight->status;
  if (wait_admission) {
    flight->cv.wait(lock, [&] { return flight->admit_done; });
    *admitted = flight->admitted;
  }
  return flight->data;
}

Result<CacheEngine::BlockData> CacheEngine::FetchBlock(const EntryView& e, const ObjectKey& key,
                                                       uint64_t block, Priority p) {
  const uint64_t start = block * block_size_;
  const uint64_t len = std::min(block_size_, e.size - start);
  auto buf = std::make_shared<std::string>(len, '\0');
  Result<size_t> n = size_t{0};
  {
    PrioritySemaphore::Permit permit(origin_slots_, p);
    c_.origin_requests.fetch_add(1, std::memory_order_relaxed);
    auto t0 = std::chrono::steady_clock::now();
    n = ufs_->Read(key.key, start, std::span<char>(buf->data(), buf->size()), key.etag);
    RecordOriginLatency(std::chrono::steady_clock::now() - t0);
  }
  if (!n.ok()) {
    c_.origin_errors.fetch_add(1, std::memory_order_relaxed);
    size_t code = static_cast<size_t>(n.status().code());
    c_.origin_errors_by_code[code < kStatusCodes ? code : kStatusCodes - 1].fetch_add(
        1, std::memory_order_relaxed);
    return n.status();
  }
  c_.origin_bytes.fetch_add(*n, std::memory_order_relaxed);
  if (*n != len) {
    c_.origin_errors.fetch_add(1, std::memory_order_relaxed);
    return Stale(ufs_->Root() + "/" + key.key + ": object changed at the origin (expected " +
                       std::to_string(len) + " bytes at offset " + std::to_string(start) + ", got " +
                       std::to_string(*n) + "); run `granary sync`");
  }
  return BlockData(std::move(buf));
}

void CacheEngine::Admit(const std::shared_ptr<Flight>& flight, const ObjectKey& key, uint64_t block,
                        BlockData data, FlightKey fk, bool served) {
  auto r = store_->AdmitBlock(key, block, *data, served);
  bool ok = r.ok() && *r;
  if (!r.ok()) {
    c_.admit_errors.fetch_add(1, std::memory_order_relaxed);
    GLOG_WARN("cache: admitting {} block {} failed: {}", key.key, block, r.status().ToString());
  } else if (*r) {
    c_.admitted.fetch_add(1, std::memory_order_relaxed);
  } else {
    c_.not_admitted.fetch_add(1, std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(flight->mu);
    flight->admit_done = true;
    flight->admitted = ok;
  }
  flight->cv.notify_all();
  std::lock_guard lock(flights_mu_);
  auto it = flights_.find(fk);
  if (it != flights_.end() && it->second == flight) flights_.erase(it);
}

void CacheEngine::MaybeReadahead(const SnapshotPtr& snap, const EntryView& e, uint64_t offset,
                                 uint64_t end) {
  if (options_.readahead_blocks == 0 || e.size <= block_size_) return;
  const uint64_t vino = VersionedIno(*snap, e.ino);
  bool sequential = false;
  {
    std::lock_guard lock(seq_mu_);
    auto it = last_end_.find(vino);
    sequential = offset == 0 || (it != last_end_.end() && it->second == offset);
    if (end >= e.size) {
      if (it != last_end_.end()) last_end_.erase(it);
    } else {
      if (last_end_.size() > 65536) last_end_.clear();  // bound memory; patterns re-form quickly
      last_end_[vino] = end;
    }
  }
  if (!sequential || end >= e.size) return;
  const ObjectKey key = KeyOf(*snap, e);
  const uint64_t first = (end + block_size_ - 1) / block_size_;
  const uint64_t last = std::min(BlockCount(e.size), first + options_.readahead_blocks);
  for (uint64_t b = first; b < last; ++b) {
    const uint64_t start = b * block_size_;
    if (store_->ContainsRange(key, start, std::min(block_size_, e.size - start))) continue;
    {
      std::lock_guard lock(flights_mu_);
      if (flights_.count(FlightKey{vino, b})) continue;
    }
    // The task holds `snap`: e's strings point into its mapping.
    readahead_pool_->Submit([this, snap, e, b] {
      auto r = GetBlock(*snap, e, b, Priority::kLow, /*wait_admission=*/false, nullptr);
      if (!r.ok()) GLOG_DEBUG("cache: readahead of block {} failed: {}", b, r.status().ToString());
    });
  }
}

EngineStats CacheEngine::stats() const {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const SnapshotPtr snap = snapshot();
  EngineStats s{
      .ufs_files = snap->file_count(),
      .ufs_bytes = snap->total_bytes(),
      .reads = ld(c_.reads),
      .hit_reads = ld(c_.hit_reads),
      .miss_reads = ld(c_.miss_reads),
      .hit_bytes = ld(c_.hit_bytes),
      .miss_bytes = ld(c_.miss_bytes),
      .read_errors = ld(c_.read_errors),
      .origin_requests = ld(c_.origin_requests),
      .origin_bytes = ld(c_.origin_bytes),
      .origin_errors = ld(c_.origin_errors),
      .flight_joins = ld(c_.flight_joins),
      .admitted = ld(c_.admitted),
      .not_admitted = ld(c_.not_admitted),
      .admit_errors = ld(c_.admit_errors),
  };
  for (size_t i = 0; i < kOriginLatencyBuckets; ++i) {
    s.origin_latency_buckets[i] = ld(c_.origin_latency_buckets[i]);
  }
  for (size_t i = 0; i < kStatusCodes; ++i) s.origin_errors_by_code[i] = ld(c_.origin_errors_by_code[i]);
  s.origin_latency_sum_s = static_cast<double>(ld(c_.origin_latency_sum_ns)) / 1e9;
  return s;
}

void CacheEngine::RecordOriginLatency(std::chrono::nanoseconds d) {
  double secs = std::chrono::duration<double>(d).count();
  size_t b = 0;
  while (b < kOriginLatencyBounds.size() && secs > kOriginLatencyBounds[b]) ++b;
  c_.origin_latency_buckets[b].fetch_add(1, std::memory_order_relaxed);
  c_.origin_latency_sum_ns.fetch_add(static_cast<uint64_t>(d.count()), std::memory_order_relaxed);
}

}  // namespace granary
