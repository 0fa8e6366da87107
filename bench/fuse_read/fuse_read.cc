// fuse_read: training-pattern read benchmark of the FUSE layer against native ext4.
//
// Generates (or reuses) a tree of ~20,000 files of ~110 KB (random bytes,
// lognormal sizes), then reads every file whole, in a fresh shuffled order
// per epoch, with N threads, in ONE run:
//   native ext4 (the source directory, page cache warm), and DirFs mounted
//   with {passthrough, cached} x {dev, uring (when available)} x
//   {fresh mount, repeat (second) and steady (third) epoch on the same mount},
//   plus native ext4 read for the second time after dropping its pages.
// Prints files/s, MB/s, p50/p99 per-file latency, process CPU µs per file
// (reader + in-process daemon), the ratio to ext4 and the page-cache growth
// of each epoch (/proc/meminfo Cached delta).
//
// Needs root (mount, passthrough). With --uring=auto it switches
// /sys/module/fuse/parameters/enable_uring on for the run and restores it.
//
//   fuse_read [--dir DIR] [--files 20000] [--threads 16] [--mean-kb 110] [--uring auto|off]
//             [--rounds 3] [--only "passthrough / dev"]
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "fuse/fuse_kernel.h"
#include "fuse/fuse_server.h"
#include "testing/dir_fs.h"

namespace granary {
namespace {

struct Config {
  std::string dir = "/tmp/granary-fuse-bench";
  int files = 20000;
  int threads = 16;
  double mean_kb = 110;
  bool uring = true;
  int rounds = 3;
  std::string only;  // run only the cells whose "mode / transport" contains this
};

struct EpochResult {
  double seconds = 0;
  uint64_t bytes = 0;
  int files = 0;
  int errors = 0;
  double p50_us = 0;
  double p99_us = 0;
  double cpu_us_per_file = 0;
  int64_t cache_growth_mb = 0;
};

int64_t CachedKb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t value;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "Cached:") return value;
  }
  return 0;
}

double CpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::vector<std::string> MakeTree(const Config& c) {
  std::vector<std::string> rels;
  std::mt19937_64 rng(1234);
  // Lognormal around mean_kb: sigma 0.5, mu chosen so the mean is mean_kb.
  double sigma = 0.5;
  std::lognormal_distribution<double> size_dist(std::log(c.mean_kb * 1024) - sigma * sigma / 2,
                                                sigma);
  std::string marker = c.dir + "/.complete-" + std::to_string(c.files);
  bool exists = std::filesystem::exists(marker);
  std::vector<char> buf(4 << 20);
  for (auto& b : buf) b = static_cast<char>(rng());
  for (int i = 0; i < c.files; ++i) {
    std::string sub = "n" + std::to_string(i / 1000);
    std::string rel = sub + "/img_" + std::to_string(i) + ".jpg";
    rels.push_back(rel);
    if (exists) continue;
    if (i % 1000 == 0) std::filesystem::create_directories(c.dir + "/" + sub);
    size_t size = std::min<size_t>(static_cast<size_t>(size_dist(rng)), buf.size() - 4096);
    std::ofstream(c.dir + "/" + rel, std::ios::binary)
        .write(buf.data() + (i * 4096) % (buf.size() - size), static_cast<std::streamsize>(size));
  }
  if (!exists) {
    sync();  // keep writeback of the new tree out of the measured epochs
    std::ofstream{marker};
  }
  return rels;
}

EpochResult RunEpoch(const std::string& root, const std::vector<std::string>& rels, int threads,
                     uint64_t seed) {
  std::vector<size_t> order(rels.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> errors{0};
  std::vector<std::vector<float>> lat(static_cast<size_t>(threads));
  int64_t cached_before = CachedKb();
  double cpu_before = CpuSeconds();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<char> buf(1 << 20);
      auto& mine = lat[static_cast<size_t>(t)];
      for (size_t i; (i = next.fetch_add(1)) < order.size();) {
        auto s = std::chrono::steady_clock::now();
        std::string path = root + "/" + rels[order[i]];
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          ++errors;
          continue;
        }
        ssize_t n;
        uint64_t got = 0;
        while ((n = read(fd, buf.data(), buf.size())) > 0) got += static_cast<uint64_t>(n);
        if (n < 0) ++errors;
        close(fd);
        bytes += got;
        mine.push_back(
            std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - s).count());
      }
    });
  }
  for (auto& th : pool) th.join();
  EpochResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_us_per_file = (CpuSeconds() - cpu_before) * 1e6 / static_cast<double>(rels.size());
  r.cache_growth_mb = (CachedKb() - cached_before) / 1024;
  std::vector<float> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  r.bytes = bytes;
  r.files = static_cast<int>(all.size());
  r.errors = errors;
  return r;
}

// Lists every directory of the tree (readdir, no stat), the way a data
// loader's dataset scan does before the first epoch.
void WalkTree(const std::string& root) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
  }
}

// With FUSE_READ_PERF_CTL=FIFO (and FUSE_READ_PERF_EPOCH=fresh|repeat|steady),
// profiles only those FUSE epochs: `perf record -D -1 --control fifo:FIFO`.
void PerfControl(const char* epoch, const char* cmd) {
  const char* fifo = std::getenv("FUSE_READ_PERF_CTL");
  const char* want = std::getenv("FUSE_READ_PERF_EPOCH");
  if (fifo == nullptr || (want != nullptr && std::strcmp(want, epoch) != 0)) return;
  std::ofstream(fifo) << cmd << std::endl;
}

double Fps(const EpochResult& r) { return r.files / r.seconds; }

// Drops the page cache of every file of the tree (POSIX_FADV_DONTNEED), so
// the next epoch reads from disk and the one after touches each page for
// the second time, as a training job's second epoch does.
void EvictTree(const std::string& root, const std::vector<std::string>& rels) {
  for (const auto& rel : rels) {
    int fd = open((root + "/" + rel).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

struct Cell {
  std::string name;
  std::vector<EpochResult> runs;
  std::vector<double> ratios;  // files/s relative to the paired native epoch
  std::string requests;        // FUSE requests of the last epoch, by opcode
};

// Prints the round with the median ratio (native: the median files/s).
void PrintCell(const Cell& x) {
  if (x.runs.empty()) return;
  std::vector<size_t> idx(x.runs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return x.ratios[a] != x.ratios[b] ? x.ratios[a] < x.ratios[b] : Fps(x.runs[a]) < Fps(x.runs[b]);
  });
  size_t m = idx[idx.size() / 2];
  const EpochResult& r = x.runs[m];
  std::printf("%-34s %9.0f %8.0f %8.0f %8.0f %9.1f %7.2fx %9lld %6d\n", x.name.c_str(), Fps(r),
              r.bytes / r.seconds / 1e6, r.p50_us, r.p99_us, r.cpu_us_per_file, x.ratios[m],
              static_cast<long long>(r.cache_growth_mb), r.errors);
}

// Sets enable_uring for the benchmark's lifetime and restores the old value.
class UringSwitch {
 public:
  explicit UringSwitch(bool want) {
    if (!want) return;
    std::ifstream in(kPath);
    if (!(in >> old_)) return;
    std::ofstream(kPath) << "Y";
  }
  ~UringSwitch() {
    if (!old_.empty()) std::ofstream(kPath) << old_;
  }

 private:
  static constexpr const char* kPath = "/sys/module/fuse/parameters/enable_uring";
  std::string old_;
};

int Main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir")
      c.dir = v;
    else if (k == "--files")
      c.files = std::stoi(v);
    else if (k == "--threads")
      c.threads = std::stoi(v);
    else if (k == "--mean-kb")
      c.mean_kb = std::stod(v);
    else if (k == "--uring")
      c.uring = v != "off";
    else if (k == "--rounds")
      c.rounds = std::max(1, std::stoi(v));
    else if (k == "--only")
      c.only = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "fuse_read needs root (mount, passthrough)\n");
    return 2;
  }
  (void)SetLogLevel("warn");
  std::printf("generating/reusing %d files in %s ...\n", c.files, c.dir.c_str());
  std::vector<std::string> rels = MakeTree(c);
  UringSwitch uring_switch(c.uring);
  RunEpoch(c.dir, rels, c.threads, 1);  // warm the page cache
  std::vector<FuseTransport> transports = {FuseTransport::kDev};
  std::ifstream uring_param("/sys/module/fuse/parameters/enable_uring");
  std::string uring_value;
  if (c.uring && (uring_param >> uring_value) && uring_value == "Y") {
    transports.push_back(FuseTransport::kUring);
  }
  // Every FUSE epoch is paired with a native epoch run just before it; the
  // ratio of the pair is the cell's measurement (the machine may be shared,
  // so absolute rates drift). Each cell reports its median round.
  std::vector<Cell> cells;
  Cell native{.name = "native ext4 (warm page cache)"};
  auto cell = [&](const std::string& name) -> Cell& {
    for (auto& x : cells) {
      if (x.name == name) return x;
    }
    cells.push_back(Cell{.name = name});
    return cells.back();
  };
  // A page read for the second time costs more than one read many times
  // (the kernel moves it to the active LRU list on that second access), so
  // a same-mount "repeat" epoch -- the second touch of the FUSE inode's pages
  // in cached mode -- is slower than the warm native epoch it is paired with,
  // which re-reads pages touched many times. This cell measures the same
  // effect on ext4 alone: drop the tree, read it once, then time the second
  // read against a warm epoch. "steady" (the third epoch on a mount) is the
  // like-for-like cell for every later epoch of a training run.
  Cell native_second{.name = "native ext4 second touch"};
  uint64_t seed = 10;
  for (int round = 0; round < c.rounds; ++round) {
    EvictTree(c.dir, rels);
    RunEpoch(c.dir, rels, c.threads, ++seed);  // from disk: first touch
    EpochResult second = RunEpoch(c.dir, rels, c.threads, ++seed);
    EpochResult warm = RunEpoch(c.dir, rels, c.threads, ++seed);
    native_second.runs.push_back(second);
    native_second.ratios.push_back(Fps(second) / Fps(warm));
    for (FuseReadMode mode : {FuseReadMode::kPassthrough, FuseReadMode::kCached}) {
      for (FuseTransport transport : transports) {
        std::string name =
            std::string(FuseReadModeName(mode)) + " / " + std::string(FuseTransportName(transport));
        if (name.find(c.only) == std::string::npos) continue;
        char mnt_tmpl[] = "/tmp/granary-fuse-bench-mnt-XXXXXX";
        std::string mnt = mkdtemp(mnt_tmpl);
        DirFs fs(DirFsOptions{.root = c.dir});
        FuseOptions fo{.mountpoint = mnt, .transport = transport, .read_mode = mode};
        auto server = std::make_unique<FuseServer>(&fs, fo);
        Status st = server->Start();
        if (!st.ok()) {
          std::printf("%-34s failed: %s\n", name.c_str(), st.ToString().c_str());
          rmdir(mnt.c_str());
          continue;
        }
        for (const char* epoch : {"fresh", "repeat", "steady", "listed"}) {
          if (std::strcmp(epoch, "listed") == 0) {
            // A fresh mount whose tree the loader lists first (untimed), as
            // torchvision's ImageFolder does when it builds its sample list.
            server->Stop();
            server = std::make_unique<FuseServer>(&fs, fo);
            st = server->Start();
            if (!st.ok()) break;
            WalkTree(mnt);
          }
          EpochResult ref = RunEpoch(c.dir, rels, c.threads, ++seed);
          FuseStats before = server->stats();
          PerfControl(epoch, "enable");
          EpochResult r = RunEpoch(mnt, rels, c.threads, ++seed);
          PerfControl(epoch, "disable");
          FuseStats after = server->stats();
          Cell& x = cell(name + " / " + epoch);
          x.runs.push_back(r);
          x.ratios.push_back(Fps(r) / Fps(ref));
          native.runs.push_back(ref);
          native.ratios.push_back(1.0);
          x.requests.clear();
          for (size_t op = 0; op < after.requests_by_opcode.size(); ++op) {
            uint64_t d = after.requests_by_opcode[op] - before.requests_by_opcode[op];
            if (d > 0)
              x.requests += " " + std::string(fusek::OpcodeName(op)) + "=" + std::to_string(d);
          }
        }
        server->Stop();
        rmdir(mnt.c_str());
      }
    }
  }
  std::printf("%d files, %d threads, %d rounds; each row is the median round\n", c.files, c.threads,
              c.rounds);
  std::printf("%-34s %9s %8s %8s %8s %9s %8s %9s %6s\n", "cell", "files/s", "MB/s", "p50us",
              "p99us", "cpu_us/f", "x_ext4", "cacheMB", "errors");
  PrintCell(native);
  PrintCell(native_second);
  for (const auto& x : cells) PrintCell(x);
  std::printf("\nrequests the kernel sent per epoch (last round):\n");
  for (const auto& x : cells) std::printf("  %-32s%s\n", x.name.c_str(), x.requests.c_str());
  return 0;
}

}  // namespace
}  // namespace granary

int main(int argc, char** argv) { return granary::Main(argc, argv); }
