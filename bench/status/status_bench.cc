// status_bench: what one `granary status` / Fluid report-summary call costs
// on an ImageNet-sized dataset whose every file is cached.
//
// Synthesizes an ImageNet-1k-shaped listing (1,281,167 files by default,
// 60..160 KB each), builds its snapshot, and fills a store index with every
// file complete: each cache file is created sparse (ftruncate to its size, no
// data written, so a million files cost inodes, not gigabytes) and the index
// checkpoint is written directly, then the store is opened (recovery). Then it
// times, per call:
//   - the old per-file scan (ScanCachedFiles: IsCached for every file),
//   - StatusReporter::Compute from the store's counters (the first call also
//     lists the snapshot's empty files, once per snapshot version).
// Both must report every file cached; the program fails otherwise.
//
//   status_bench [--dir DIR] [--files N] [--calls N]
//
// DIR defaults to a fresh directory under /dev/shm (removed at exit).
// Thread safety: single-threaded program (the store's recovery uses threads).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/engine.h"
#include "common/log.h"
#include "control/status.h"
#include "meta/snapshot.h"
#include "store/index_format.h"
#include "store/store.h"
#include "testing/mem_ufs.h"

namespace granary {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ImageNet-1k shape: 1000 class directories, `files` files spread over them.
std::vector<ObjectInfo> Listing(uint64_t files) {
  std::mt19937_64 rng(42);
  std::vector<ObjectInfo> out;
  out.reserve(files);
  char wnid[16], name[64], etag[40];
  for (uint64_t i = 0; i < files; ++i) {
    std::snprintf(wnid, sizeof(wnid), "n%08d", static_cast<int>(1440764 + (i % 1000) * 9973));
    std::snprintf(name, sizeof(name), "%s_%llu.JPEG", wnid,
                  static_cast<unsigned long long>(10000 + i));
    std::snprintf(etag, sizeof(etag), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(rng()));
    out.push_back(ObjectInfo{.key = std::string("imagenet/train/") + wnid + "/" + name,
                             .size = 60'000 + rng() % 100'000,
                             .mtime_ns = 1'600'000'000'000'000'000,
                             .etag = etag});
  }
  return out;
}

struct Args {
  std::string dir;
  uint64_t files = 1'281'167;
  int calls = 5;
};

int Run(const Args& args) {
  namespace fs = std::filesystem;
  SetLogLevel("warn").IgnoreError();
  const std::string tier_dir = args.dir + "/ssd", index_dir = args.dir + "/index";
  fs::create_directories(args.dir);

  auto t0 = SteadyClock::now();
  auto built = Snapshot::BuildFromEntries(
      Listing(args.files), {.source_uri = "s3://bench/imagenet", .prefix = "imagenet"},
      args.dir + "/snapshot", 1);
  if (!built.ok()) {
    std::fprintf(stderr, "snapshot: %s\n", built.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<const Snapshot> snap = std::move(*built);
  auto t1 = SteadyClock::now();

  StoreOptions store_opts{
      .tiers = {TierLevel{.medium = Medium::kSsd, .path = tier_dir, .quota = 1ull << 50}},
      .index_dir = index_dir,
      .background = false};
  auto ufs = std::make_shared<testing::MemUfs>("mem://bench");
  const EngineOptions engine_opts{.dataset = "bench"};
  // The cache keys, as the engine makes them.
  std::vector<ObjectKey> keys;
  keys.reserve(snap->file_count());
  {
    auto empty = Store::Open(store_opts);  // creates the tier's fan-out directories
    if (!empty.ok()) {
      std::fprintf(stderr, "store: %s\n", empty.status().ToString().c_str());
      return 1;
    }
    CacheEngine engine(ufs, snap, empty->get(), engine_opts);
    snap->ForEachFile([&](const EntryView& e) { keys.push_back(engine.KeyOf(*snap, e)); });
  }
  for (const ObjectKey& k : keys) {
    const std::string name = CacheFileName(k);
    const std::string path = tier_dir + "/" + name.substr(0, 2) + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(k.size)) != 0) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), std::strerror(errno));
      return 1;
    }
    ::close(fd);
  }
  size_t next = 0;
  Status written =
      store_format::WriteCheckpoint(index_dir, 1'000'000, 0, [&](store_format::EntryRecord& r) {
        if (next == keys.size()) return false;
        const ObjectKey& k = keys[next++];
        const ObjectId id = IdOf(k);
        r = store_format::EntryRecord{.id_hi = id.hi,
                                      .id_lo = id.lo,
                                      .dataset = k.dataset,
                                      .key = k.key,
                                      .etag = k.etag,
                                      .size = k.size,
                                      .last_use = next,
                                      .checksums = {0},
                                      .present = {1}};
        return true;
      });
  if (!written.ok()) {
    std::fprintf(stderr, "checkpoint: %s\n", written.ToString().c_str());
    return 1;
  }
  auto t2 = SteadyClock::now();
  auto opened = Store::Open(store_opts);
  if (!opened.ok()) {
    std::fprintf(stderr, "store: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Store> store = std::move(*opened);
  auto t3 = SteadyClock::now();
  CacheEngine engine(ufs, snap, store.get(), engine_opts);
  StatusReporter reporter(&engine, nullptr, "");

  double scan_total = 0, scan_min = 1e9;
  CachedFigures scan;
  for (int i = 0; i < args.calls; ++i) {
    auto a = SteadyClock::now();
    scan = ScanCachedFiles(engine, *snap);
    double s = Seconds(a, SteadyClock::now());
    scan_total += s;
    scan_min = std::min(scan_min, s);
  }
  auto a = SteadyClock::now();
  DatasetStatus first = reporter.Compute();
  const double first_call = Seconds(a, SteadyClock::now());
  double counters_total = 0, counters_min = 1e9;
  DatasetStatus st;
  for (int i = 0; i < args.calls; ++i) {
    a = SteadyClock::now();
    st = reporter.Compute();
    double s = Seconds(a, SteadyClock::now());
    counters_total += s;
    counters_min = std::min(counters_min, s);
  }
  const StoreStats ss = store->stats();

  std::printf("files %llu, %.2f GB listed; %llu index entries recovered\n",
              static_cast<unsigned long long>(snap->file_count()), snap->total_bytes() / 1e9,
              static_cast<unsigned long long>(ss.recovered_objects));
  std::printf("setup: snapshot %.2f s, sparse files + checkpoint %.2f s, store open %.2f s\n\n",
              Seconds(t0, t1), Seconds(t1, t2), Seconds(t2, t3));
  std::printf(
      "| per status call (%2d calls)                        | mean         | min          |\n",
      args.calls);
  std::printf(
      "|---------------------------------------------------|--------------|--------------|\n");
  std::printf("| old: IsCached per file (ScanCachedFiles)          | %9.3f ms | %9.3f ms |\n",
              scan_total / args.calls * 1e3, scan_min * 1e3);
  std::printf("| new: Compute from the store's counters            | %9.3f ms | %9.3f ms |\n",
              counters_total / args.calls * 1e3, counters_min * 1e3);
  std::printf("| new, first call per snapshot (lists empty files)  | %9.3f ms |              |\n",
              first_call * 1e3);
  std::printf(
      "\ncached files: scan %llu, counters %llu (first call %llu) of %llu; "
      "cached bytes: scan %llu, counters %llu of %llu; CACHED%% %.1f\n",
      static_cast<unsigned long long>(scan.files), static_cast<unsigned long long>(st.cached_files),
      static_cast<unsigned long long>(first.cached_files),
      static_cast<unsigned long long>(st.ufs_files), static_cast<unsigned long long>(scan.bytes),
      static_cast<unsigned long long>(st.cached_bytes),
      static_cast<unsigned long long>(st.ufs_total_bytes), st.cached_ratio * 100);
  const bool exact = scan.files == st.ufs_files && st.cached_files == st.ufs_files &&
                     first.cached_files == st.ufs_files && scan.bytes == st.ufs_total_bytes &&
                     st.cached_bytes == st.ufs_total_bytes && st.cached_ratio == 1.0;
  if (!exact) std::fprintf(stderr, "status_bench: figures are not exact\n");
  return exact ? 0 : 1;
}

}  // namespace
}  // namespace granary

int main(int argc, char** argv) {
  granary::Args args;
  bool own_dir = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--dir") {
      args.dir = argv[i + 1];
      own_dir = false;
    } else if (flag == "--files") {
      args.files = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--calls") {
      args.calls = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: status_bench [--dir DIR] [--files N] [--calls N]\n");
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0) {
    std::fprintf(stderr, "usage: status_bench [--dir DIR] [--files N] [--calls N]\n");
    return 2;
  }
  if (own_dir) args.dir = "/dev/shm/granary-status-bench-" + std::to_string(::getpid());
  int rc = granary::Run(args);
  if (own_dir) {
    std::error_code ec;
    std::filesystem::remove_all(args.dir, ec);
  }
  return rc;
}
