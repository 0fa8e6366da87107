// load_bench: warm-up throughput against the origin's ceiling, in process.
//
// A dataset of small files in a local directory is served through the POSIX
// connector wrapped with a fixed per-request delay (0 and 10 ms: a stand-in for
// S3 latency). For each delay it prints:
//   ceiling   best objects/s of plain concurrent GETs at 1..128 threads (what
//             bench/ufs_get measures against a real server)
//   load      LoadJob over a cold cache (--concurrency fetch threads = origin slots), objects/s and
//   x ceiling epoch     16 readers reading every object once in shuffled order through
//             CacheEngine::Read, cold cache, without and with a background
//             LoadJob started at the same moment (the `mount --load` case):
//             objects/s and x ceiling.
//
//   load_bench [--dir /dev/shm/granary-load-bench] [--objects 3000] [--size 16384] [--concurrency
//   128]
#include <CLI/CLI.hpp>
#include <algorithm>
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
#include "control/loader.h"
#include "dataset/dataset.h"
#include "ufs/open.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

// Forwards to `inner`, sleeping `delay` before every read (simulated origin latency).
class DelayUfs : public UnderStorage {
 public:
  DelayUfs(std::unique_ptr<UnderStorage> inner, std::chrono::microseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  std::string Root() const override { return inner_->Root(); }

 protected:
  Result<ListPage> ListImpl(const ListRequest& r) override { return inner_->List(r); }
  Result<ObjectInfo> StatImpl(std::string_view key) override { return inner_->Stat(key); }
  Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                          std::string_view if_match, std::optional<uint64_t>* xxh3) override {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    return inner_->Read(key, offset, out, if_match, xxh3);
  }

 private:
  std::unique_ptr<UnderStorage> inner_;
  std::chrono::microseconds delay_;
};

int g_concurrency = 128;  // engine origin slots and load threads (--concurrency)

double Seconds(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

double Ceiling(UnderStorage& ufs, const std::vector<std::string>& keys, size_t size) {
  double best = 0;
  for (int threads : {1, 4, 16, 64, 128}) {
    std::atomic<size_t> next{0};
    size_t n = std::min(keys.size(), static_cast<size_t>(threads) * 40);
    auto t0 = SteadyClock::now();
    std::vector<std::thread> ws;
    for (int t = 0; t < threads; ++t) {
      ws.emplace_back([&] {
        std::string buf(size, '\0');
        for (size_t i; (i = next.fetch_add(1)) < n;) {
          auto r = ufs.Read(keys[i], 0, std::span<char>(buf.data(), buf.size()));
          if (!r.ok()) std::fprintf(stderr, "read: %s\n", r.status().ToString().c_str());
        }
      });
    }
    for (auto& w : ws) w.join();
    best = std::max(best, n / Seconds(t0));
  }
  return best;
}

struct Env {
  std::unique_ptr<Dataset> dataset;
  std::shared_ptr<const Snapshot> snapshot;
  CacheEngine* engine = nullptr;  // dataset's
};

// A cold cache over `ufs` (the dataset at `source`), opened through Dataset.
Env Cold(const fs::path& dir, std::shared_ptr<UnderStorage> ufs, const std::string& source) {
  fs::remove_all(dir / "cache");
  DatasetOptions o;
  o.source = source;
  o.cache_dirs = {
      TierLevel{.medium = Medium::kMem, .path = (dir / "cache").string(), .quota = 4ull << 30}};
  o.engine.origin_concurrency = g_concurrency;
  o.store_background = false;
  auto ds = Dataset::Open(std::move(o), std::move(ufs));
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    std::exit(1);
  }
  Env e{.dataset = std::move(*ds)};
  e.snapshot = e.dataset->snapshot();
  e.engine = &e.dataset->engine();
  return e;
}

// 16 readers, every file once in shuffled order; objects/s.
double Epoch(Env& e, bool with_load) {
  std::vector<uint64_t> inos;
  e.snapshot->ForEachFile([&](const EntryView& v) { inos.push_back(v.ino); });
  std::shuffle(inos.begin(), inos.end(), std::mt19937(42));
  auto t0 = SteadyClock::now();
  std::unique_ptr<LoadManager> loads;
  if (with_load) {
    loads = std::make_unique<LoadManager>(e.engine);
    if (!loads->Start(LoadRequest{.threads = g_concurrency}).ok())
      std::fprintf(stderr, "load failed to start\n");
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> ws;
  for (int t = 0; t < 16; ++t) {
    ws.emplace_back([&] {
      std::string buf(1 << 20, '\0');
      for (size_t i; (i = next.fetch_add(1)) < inos.size();) {
        auto r = e.engine->Read(inos[i], 0, std::span<char>(buf.data(), buf.size()));
        if (!r.ok()) std::fprintf(stderr, "read: %s\n", r.status().ToString().c_str());
      }
    });
  }
  for (auto& w : ws) w.join();
  double rate = inos.size() / Seconds(t0);
  if (loads) loads->Cancel().IgnoreError();
  return rate;
}

int Main(int argc, char** argv) {
  CLI::App app("load_bench");
  std::string dir = "/dev/shm/granary-load-bench";
  int objects = 3000;
  size_t size = 16384;
  app.add_option("--dir", dir);
  app.add_option("--objects", objects);
  app.add_option("--size", size);
  app.add_option("--concurrency", g_concurrency, "Engine origin slots and load threads");
  CLI11_PARSE(app, argc, argv);
  SetLogLevel("warn").IgnoreError();
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  fs::path root(dir);
  fs::remove_all(root);
  std::vector<std::string> keys;
  for (int i = 0; i < objects; ++i) {
    std::string rel = "train/c" + std::to_string(i % 50) + "/" + std::to_string(i) + ".JPEG";
    fs::create_directories((root / "src" / rel).parent_path());
    std::ofstream(root / "src" / rel) << std::string(size, 'x');
    keys.push_back(rel);  // made absolute below, once the URI's key prefix is known
  }
  std::printf("%-7s %-10s %10s %10s %8s\n", "delay", "what", "objects/s", "MB/s", "x ceil");
  for (int delay_ms : {0, 10}) {
    Uri uri = *ParseUri((root / "src").string());
    auto inner = OpenUnderStorage(uri);
    if (!inner.ok()) return std::fprintf(stderr, "%s\n", inner.status().ToString().c_str()), 1;
    auto ufs = std::make_shared<DelayUfs>(std::move(*inner), std::chrono::milliseconds(delay_ms));
    std::shared_ptr<const Snapshot> snap = std::move(
        *Snapshot::Build(*ufs, SnapshotOptions{.source_uri = uri.ToString(), .prefix = uri.key},
                         (root / "snapshot").string(), 1));
    std::vector<std::string> full_keys;
    for (const auto& k : keys) full_keys.push_back(snap->prefix() + k);
    double ceiling = Ceiling(*ufs, full_keys, size);
    auto row = [&](const char* what, double rate) {
      std::printf("%-7s %-10s %10.0f %10.1f %8.2f\n", (std::to_string(delay_ms) + "ms").c_str(),
                  what, rate, rate * size / 1e6, rate / ceiling);
    };
    row("ceiling", ceiling);
    {
      Env e = Cold(root, ufs, uri.ToString());
      LoadManager loads(e.engine);
      auto t0 = SteadyClock::now();
      auto job = loads.Start(LoadRequest{.threads = g_concurrency});
      LoadResult r = (*job)->Wait();
      row("load", r.files_cached / Seconds(t0));
    }
    {
      Env e = Cold(root, ufs, uri.ToString());
      row("epoch", Epoch(e, false));
    }
    {
      Env e = Cold(root, ufs, uri.ToString());
      row("epoch+load", Epoch(e, true));
    }
  }
  fs::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace granary

int main(int argc, char** argv) { return granary::Main(argc, argv); }
