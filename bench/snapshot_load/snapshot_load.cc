// snapshot_load: how fast and how small is an ImageNet-sized dataset snapshot?
//
// Synthesizes an ImageNet-1k-shaped listing (train/<wnid>/<wnid>_<n>.JPEG,
// 1000 classes x 1281 files by default, ~110 KB objects, 32-hex etags), builds
// a snapshot file from it, then measures what a remount pays: load time (mmap,
// header + body checksum, record validation) with the file in the page cache
// and after dropping it from the page cache, the process's RSS growth, and the
// cost of Lookup / FindPath / Get / ReadDir. Prints one table.
//
//   snapshot_load [--dir DIR] [--classes N] [--files-per-class N] [--loads N]
//
// Thread safety: single-threaded program.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/log.h"
#include "meta/snapshot.h"
#if GRANARY_BENCH_HAVE_MEM_UFS
#include "testing/mem_ufs.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// kB values of VmRSS, RssAnon, RssFile from /proc/self/status.
struct Rss {
  long total = 0, anon = 0, file = 0;
};
Rss ReadRss() {
  Rss r;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    long v = std::atol(line.c_str() + line.find(':') + 1);
    if (line.starts_with("VmRSS:")) r.total = v;
    if (line.starts_with("RssAnon:")) r.anon = v;
    if (line.starts_with("RssFile:")) r.file = v;
  }
  return r;
}

std::vector<granary::ObjectInfo> ImageNetListing(int classes, int per_class) {
  std::mt19937_64 rng(42);
  std::vector<granary::ObjectInfo> out;
  out.reserve(static_cast<size_t>(classes) * per_class);
  char wnid[16], name[64], etag[40];
  for (int c = 0; c < classes; ++c) {
    std::snprintf(wnid, sizeof(wnid), "n%08d", 1440764 + c * 9973);
    for (int f = 0; f < per_class; ++f) {
      std::snprintf(name, sizeof(name), "%s_%d.JPEG", wnid, 10000 + f * 7);
      std::snprintf(etag, sizeof(etag), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                    static_cast<unsigned long long>(rng()));
      out.push_back(granary::ObjectInfo{
          .key = std::string("imagenet/train/") + wnid + "/" + name,
          .size = 60'000 + rng() % 100'000,
          .mtime_ns = 1'600'000'000'000'000'000 + static_cast<int64_t>(rng() % 1'000'000'000),
          .etag = etag});
    }
  }
  return out;
}

void DropFromPageCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Seconds for Snapshot::Build through MemUfs (parallel ListAll + write), or -1
// when the fakes are not built. Objects are empty: only the listing is timed.
double BuildThroughMemUfs(const std::vector<granary::ObjectInfo>& listing,
                          const std::string& path) {
#if GRANARY_BENCH_HAVE_MEM_UFS
  granary::testing::MemUfs ufs;
  for (const auto& o : listing) ufs.Put(o.key, "", o.mtime_ns);
  auto t0 = Clock::now();
  auto s = granary::Snapshot::Build(
      ufs, {.source_uri = "mem://bench/imagenet", .prefix = "imagenet"}, path, 1);
  double secs = Seconds(t0, Clock::now());
  std::remove(path.c_str());
  return s.ok() ? secs : -1;
#else
  return -1;
#endif
}

template <typename Fn>
double NsPerOp(size_t ops, Fn&& fn) {
  auto t0 = Clock::now();
  fn();
  return Seconds(t0, Clock::now()) * 1e9 / static_cast<double>(ops);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::filesystem::temp_directory_path().string();
  int classes = 1000, per_class = 1281, loads = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--dir")
      dir = argv[i + 1];
    else if (flag == "--classes")
      classes = std::atoi(argv[i + 1]);
    else if (flag == "--files-per-class")
      per_class = std::atoi(argv[i + 1]);
    else if (flag == "--loads")
      loads = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr,
                   "unknown flag %s\nusage: snapshot_load [--dir DIR] [--classes N] "
                   "[--files-per-class N] [--loads N]\n",
                   argv[i]);
      return 2;
    }
  }
  granary::SetLogLevel("warn").IgnoreError();
  const std::string path = dir + "/snapshot_load.bench.snap";

  // Sample paths before building (the listing is moved into the build).
  auto listing = ImageNetListing(classes, per_class);
  const uint64_t n_files = listing.size();
  std::mt19937_64 rng(7);
  std::vector<std::string> sample;
  for (int i = 0; i < 200'000; ++i)
    sample.push_back(listing[rng() % n_files].key.substr(sizeof("imagenet/") - 1));

  const double mem_ufs_build = BuildThroughMemUfs(listing, path);
  auto t0 = Clock::now();
  auto built = granary::Snapshot::BuildFromEntries(
      std::move(listing), {.source_uri = "s3://bench/imagenet", .prefix = "imagenet"}, path, 1);
  auto t1 = Clock::now();
  if (!built.ok()) {
    std::fprintf(stderr, "build failed: %s\n", built.status().ToString().c_str());
    return 1;
  }
  const uint64_t entries = (*built)->max_ino();
  const uint64_t file_bytes = (*built)->file_size();
  built->reset();

  DropFromPageCache(path);
  Rss before = ReadRss();
  auto c0 = Clock::now();
  auto cold = granary::Snapshot::Load(path);
  auto c1 = Clock::now();
  Rss after = ReadRss();
  if (!cold.ok()) {
    std::fprintf(stderr, "load failed: %s\n", cold.status().ToString().c_str());
    return 1;
  }
  std::vector<double> warm;
  for (int i = 0; i < loads; ++i) {
    auto w0 = Clock::now();
    auto s = granary::Snapshot::Load(path);
    warm.push_back(Seconds(w0, Clock::now()));
  }
  std::sort(warm.begin(), warm.end());
  const granary::Snapshot& s = **cold;

  std::vector<std::pair<uint64_t, std::string>> lookups;  // (parent ino, name)
  for (const auto& p : sample) {
    size_t slash = p.rfind('/');
    lookups.emplace_back(*s.FindPath(p.substr(0, slash)), p.substr(slash + 1));
  }
  volatile uint64_t sink = 0;
  double find_ns = NsPerOp(sample.size(), [&] {
    for (const auto& p : sample) sink = sink + *s.FindPath(p);
  });
  double lookup_ns = NsPerOp(lookups.size(), [&] {
    for (const auto& [d, nm] : lookups) sink = sink + *s.Lookup(d, nm);
  });
  double get_ns = NsPerOp(1'000'000, [&] {
    for (uint64_t i = 0; i < 1'000'000; ++i) sink = sink + s.Get(1 + (i * 7919) % entries)->size;
  });
  double path_ns = NsPerOp(100'000, [&] {
    for (uint64_t i = 0; i < 100'000; ++i) sink = sink + s.Path(1 + (i * 7919) % entries).size();
  });
  uint64_t class_dir = *s.FindPath("train/" + sample[0].substr(6, 9));
  double readdir_ns = NsPerOp(1000, [&] {
    for (int i = 0; i < 1000; ++i) sink = sink + s.ReadDir(class_dir, 0, 1u << 20).size();
  });

  std::printf("snapshot_load: %llu files, %llu entries, file %s\n",
              static_cast<unsigned long long>(n_files), static_cast<unsigned long long>(entries),
              path.c_str());
  std::printf("| metric | value |\n|---|---|\n");
  std::printf("| build (BuildFromEntries, incl. write+fsync+verify) | %.2f s |\n", Seconds(t0, t1));
  if (mem_ufs_build >= 0) {
    std::printf("| build (Build via MemUfs ListAll, parallelism 16) | %.2f s |\n", mem_ufs_build);
  }
  std::printf("| file size | %.1f MiB (%.1f B/entry) |\n", file_bytes / 1048576.0,
              double(file_bytes) / entries);
  std::printf("| load, file not in page cache | %.1f ms |\n", Seconds(c0, c1) * 1e3);
  std::printf("| load, page cache warm (median of %d) | %.1f ms |\n", loads,
              warm[warm.size() / 2] * 1e3);
  std::printf("| RSS delta after load: anon (heap state) | %ld KiB (%.3f B/entry) |\n",
              after.anon - before.anon, (after.anon - before.anon) * 1024.0 / entries);
  std::printf("| RSS delta after load: file-backed mapping | %ld KiB (%.1f B/entry) |\n",
              after.file - before.file, (after.file - before.file) * 1024.0 / entries);
  std::printf("| FindPath(\"train/<wnid>/<file>.JPEG\") | %.0f ns/op |\n", find_ns);
  std::printf("| Lookup(dir ino, name) | %.0f ns/op |\n", lookup_ns);
  std::printf("| Get(ino) | %.0f ns/op |\n", get_ns);
  std::printf("| Path(ino) | %.0f ns/op |\n", path_ns);
  std::printf("| ReadDir(class dir, all %llu) | %.1f us/op |\n",
              static_cast<unsigned long long>(s.Get(class_dir)->child_count), readdir_ns / 1e3);
  std::remove(path.c_str());
  return 0;
}
