// store_read: the store's hit path and the policies' hit rates.
//
// Table 1: Read() throughput of 110 KB objects already in the store (page
// cache warm), with 1..16 threads picking objects at random.
// Table 2: the same after a restart, first touch (each object's checksum is
// verified on its first read), single pass, 16 threads.
// Table 3: hit rate of lru vs training at cache fractions 20/35/65% under 3
// random-permutation epochs (simulated reads through a real Store).
// Last row: Open time and index memory with many entries.
//
//   store_read [--dir /dev/shm] [--objects 4000] [--size 112640] [--seconds 1]
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "store/store.h"
#include "testing/epoch_sim.h"

namespace granary {
namespace {

using Clock = std::chrono::steady_clock;

ObjectKey BenchKey(int i, uint64_t size) {
  return ObjectKey{
      .dataset = "bench", .key = "train/" + std::to_string(i) + ".JPEG", .etag = "e", .size = size};
}

StoreOptions BenchOptions(const std::string& dir, uint64_t quota) {
  return StoreOptions{.tiers = {TierLevel{.medium = Medium::kSsd, .path = dir, .quota = quota}},
                      .background = false};
}

struct Rate {
  double objects_per_s, gb_per_s;
};

Rate ReadRandom(Store& store, int objects, uint64_t size, int threads, double seconds) {
  std::atomic<uint64_t> total{0};
  std::atomic<bool> failed{false};
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      std::string buf(size, '\0');
      uint64_t n = 0;
      while ((n & 63) != 0 || Clock::now() < deadline) {
        if (!store.Read(BenchKey(static_cast<int>(rng() % objects), size), 0, std::span(buf))
                 .ok()) {
          failed = true;
        }
        ++n;
      }
      total += n;
    });
  }
  for (auto& w : workers) w.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) std::fprintf(stderr, "warning: some reads missed\n");
  return {total / secs, total * static_cast<double>(size) / secs / 1e9};
}

Rate ReadEachOnce(Store& store, int objects, uint64_t size, int threads) {
  std::atomic<int> next{0};
  auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      std::string buf(size, '\0');
      for (int i; (i = next++) < objects;) (void)store.Read(BenchKey(i, size), 0, std::span(buf));
    });
  }
  for (auto& w : workers) w.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return {objects / secs, objects * static_cast<double>(size) / secs / 1e9};
}

// Heap bytes in use (glibc).
uint64_t HeapInUse() {
  struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Index memory and Open (recovery) time with `entries` tiny objects.
int IndexScale(const std::string& dir, int entries) {
  std::string data(100, 'x');
  StoreOptions opt = BenchOptions(dir, 1ull << 40);
  {
    auto store = Store::Open(opt);
    if (!store.ok()) return 1;
    for (int i = 0; i < entries; ++i) (void)(*store)->AdmitObject(BenchKey(i, data.size()), data);
  }
  uint64_t before = HeapInUse();
  auto t0 = Clock::now();
  auto store = Store::Open(opt);
  double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  uint64_t after = HeapInUse();
  if (!store.ok()) return 1;
  std::printf(
      "\nIndex scale: %d entries (keys like \"train/123456.JPEG\"): Open %.0f ms "
      "(checkpoint load + stat of every file + orphan scan), %.0f heap bytes per entry\n",
      entries, open_ms, static_cast<double>(after - before) / entries);
  return 0;
}

int Run(const std::string& base, int objects, uint64_t size, double seconds, int index_entries) {
  std::string dir = base + "/granary-store-read-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  uint64_t quota = static_cast<uint64_t>(objects) * (size + 8192) * 2;
  {
    auto store = Store::Open(BenchOptions(dir + "/tier", quota));
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
      return 1;
    }
    std::string data(size, 'j');
    auto t0 = Clock::now();
    for (int i = 0; i < objects; ++i) {
      if (!(*store)->AdmitObject(BenchKey(i, size), data).value_or(false)) {
        std::fprintf(stderr, "admission %d failed\n", i);
        return 1;
      }
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("store_read: %d objects of %llu bytes in %s\n", objects,
                static_cast<unsigned long long>(size), dir.c_str());
    std::printf("admission (1 thread): %.0f objects/s\n\n", objects / secs);
    std::printf("Hit path, warm (Read of whole objects, random keys, %.1fs per row)\n", seconds);
    std::printf("| threads | objects/s | GB/s |\n|---:|---:|---:|\n");
    for (int threads : {1, 2, 4, 8, 16}) {
      Rate r = ReadRandom(**store, objects, size, threads, seconds);
      std::printf("| %d | %.0f | %.2f |\n", threads, r.objects_per_s, r.gb_per_s);
    }
  }
  {
    auto t0 = Clock::now();
    auto store = Store::Open(BenchOptions(dir + "/tier", quota));
    double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    Rate r = ReadEachOnce(**store, objects, size, 16);
    std::printf(
        "\nAfter restart: Open %.0f ms (%d entries); first reads (checksum verified), "
        "16 threads: %.0f objects/s, %.2f GB/s\n",
        open_ms, objects, r.objects_per_s, r.gb_per_s);
  }
  std::printf("\nHit rate, 10,000 objects, 3 random-permutation epochs (epoch 1 / 2 / 3)\n");
  std::printf("| cache fraction | lru | training |\n|---:|---|---|\n");
  for (double fraction : {0.20, 0.35, 0.65}) {
    std::string cells[2];
    const char* policies[2] = {"lru", "training"};
    for (int p = 0; p < 2; ++p) {
      std::string sim_dir = dir + "/sim-" + policies[p];
      auto rates =
          SimulateEpochs({.dir = sim_dir, .policy = policies[p], .cache_fraction = fraction});
      std::filesystem::remove_all(sim_dir);
      if (!rates.ok()) {
        std::fprintf(stderr, "%s\n", rates.status().ToString().c_str());
        return 1;
      }
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.1f%% / %.1f%% / %.1f%%", 100 * (*rates)[0],
                    100 * (*rates)[1], 100 * (*rates)[2]);
      cells[p] = buf;
    }
    std::printf("| %.0f%% | %s | %s |\n", 100 * fraction, cells[0].c_str(), cells[1].c_str());
  }
  if (index_entries > 0 && IndexScale(dir + "/index-scale", index_entries) != 0) return 1;
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace granary

int main(int argc, char** argv) {
  CLI::App app("store_read: hit-path throughput and policy hit rates of the Granary store");
  std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  int objects = 4000;
  uint64_t size = 110 * 1024;
  double seconds = 1.0;
  int index_entries = 100'000;
  app.add_option("--dir", dir, "directory for the store's files");
  app.add_option("--objects", objects, "objects in the hit-path test")->check(CLI::PositiveNumber);
  app.add_option("--size", size, "object size in bytes")->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "seconds per throughput row")->check(CLI::PositiveNumber);
  app.add_option("--index-entries", index_entries, "entries for the index scale row (0: skip)");
  CLI11_PARSE(app, argc, argv);
  return granary::Run(dir, objects, size, seconds, index_entries);
}
