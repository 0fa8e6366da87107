// engine_read: the cache engine's in-process hit path.
//
// Builds a dataset of ImageNet-sized files (110 KB) in a local directory,
// serves it through the POSIX connector, a Snapshot, a Store and a
// CacheEngine, warms the cache with Fetch(), then reads whole objects at random
// through CacheEngine::Read with 1..16 threads. Prints objects/s and GB/s per
// thread count, plus the cold pass (origin = the local directory) for scale.
// The policies' hit-rate table is in bench/store_read.
//
//   engine_read [--dir /dev/shm/granary-engine-bench] [--objects 4000] [--seconds 1]
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "cache/engine.h"
#include "common/log.h"
#include "common/uri.h"
#include "dataset/dataset.h"
#include "ufs/open.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

struct Row {
  int threads;
  double objects_per_s;
  double gb_per_s;
};

// Reads random whole objects for `seconds` with `threads` threads.
Row Measure(CacheEngine& engine, const std::vector<uint64_t>& inos, int threads, double seconds) {
  std::atomic<uint64_t> objects{0}, bytes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      std::string buf(256 << 10, '\0');
      while (!stop.load(std::memory_order_relaxed)) {
        uint64_t ino = inos[rng() % inos.size()];
        auto n = engine.Read(ino, 0, std::span<char>(buf.data(), buf.size()));
        if (!n.ok()) {
          std::fprintf(stderr, "read failed: %s\n", n.status().ToString().c_str());
          std::exit(1);
        }
        objects.fetch_add(1, std::memory_order_relaxed);
        bytes.fetch_add(*n, std::memory_order_relaxed);
      }
    });
  }
  auto start = SteadyClock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  double el = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return Row{threads, objects / el, bytes / el / 1e9};
}

int Main(int argc, char** argv) {
  CLI::App app{"engine_read: CacheEngine hit-path throughput"};
  std::string dir = "/dev/shm/granary-engine-bench";
  int objects = 4000;
  double seconds = 1.0;
  app.add_option("--dir", dir, "scratch directory (origin files + cache)");
  app.add_option("--objects", objects, "number of 110 KB objects");
  app.add_option("--seconds", seconds, "seconds per thread count");
  CLI11_PARSE(app, argc, argv);
  InitLogging();
  SetLogLevel("warn").IgnoreError();

  fs::remove_all(dir);
  fs::create_directories(fs::path(dir) / "origin" / "train");
  fs::create_directories(fs::path(dir) / "cache");
  std::mt19937 rng(42);
  std::string data(112640, '\0');
  for (int i = 0; i < objects; ++i) {
    for (auto& c : data) c = static_cast<char>(rng());
    std::ofstream(fs::path(dir) / "origin" / "train" / (std::to_string(i) + ".JPEG"),
                  std::ios::binary)
        << data;
  }
  auto uri = ParseUri(dir + "/origin");
  auto ufs = OpenUnderStorage(*uri);
  if (!ufs.ok()) return std::fprintf(stderr, "%s\n", ufs.status().ToString().c_str()), 1;
  std::shared_ptr<UnderStorage> shared_ufs = std::move(*ufs);
  DatasetOptions o;
  o.source = uri->ToString();
  o.cache_dirs = {TierLevel{.medium = Medium::kMem, .path = dir + "/cache", .quota = 64ull << 30}};
  o.store_background = false;
  auto ds = Dataset::Open(std::move(o), shared_ufs);
  if (!ds.ok()) return std::fprintf(stderr, "%s\n", ds.status().ToString().c_str()), 1;
  CacheEngine& engine = (*ds)->engine();
  std::shared_ptr<const Snapshot> snapshot = (*ds)->snapshot();
  std::vector<uint64_t> inos;
  snapshot->ForEachFile([&](const EntryView& e) { inos.push_back(e.ino); });

  auto t0 = SteadyClock::now();
  std::atomic<size_t> next{0};
  std::vector<std::thread> loaders;
  for (int t = 0; t < 8; ++t) {
    loaders.emplace_back([&] {
      for (size_t i = next++; i < inos.size(); i = next++)
        engine.Fetch(inos[i]).status().IgnoreError();
    });
  }
  for (auto& l : loaders) l.join();
  double cold_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  std::printf("engine_read: %d objects of 110 KB, cache in %s\n", objects, dir.c_str());
  std::printf("cold Fetch (origin = local dir, 8 threads): %.0f objects/s\n\n", objects / cold_s);
  std::printf("| threads | objects/s | GB/s |\n|---|---|---|\n");
  for (int threads : {1, 2, 4, 8, 16}) {
    Row r = Measure(engine, inos, threads, seconds);
    std::printf("| %d | %.0f | %.2f |\n", r.threads, r.objects_per_s, r.gb_per_s);
  }
  auto st = engine.stats();
  std::printf(
      "\norigin requests during the hit-path runs: %llu (expected 0 beyond the cold pass: %d)\n",
      static_cast<unsigned long long>(st.origin_requests), objects);
  fs::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace granary

int main(int argc, char** argv) { return granary::Main(argc, argv); }
