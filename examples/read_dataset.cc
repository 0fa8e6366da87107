// Reading a Granary dataset with the native C++ API (docs/api.md).
//
//   read_dataset /mnt/imagenet/train                   # attach to a mount's daemon
//   read_dataset s3://bucket/imagenet --cache-dir /data/cache:500G [--endpoint URL]
//
// Lists every file from the snapshot (no directory walk), hands the shuffled
// order to the engine's prefetcher, reads every file whole with 16 threads and
// prints files/s and MB/s.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "granary/client.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MOUNT_PATH | SOURCE --cache-dir DIR[:QUOTA] [--endpoint URL]\n",
                 argv[0]);
    return 2;
  }
  std::string target = argv[1];
  granary::OpenOptions open;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--cache-dir") {
      open.cache_dirs.push_back(argv[i + 1]);
    } else if (flag == "--endpoint") {
      open.origin_options["endpoint"] = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  // A cache dir means "run the dataset here"; otherwise attach to the mount's daemon.
  auto client = open.cache_dirs.empty() ? granary::Client::Attach(target)
                                        : granary::Client::Open(target, open);
  if (!client.ok()) {
    std::fprintf(stderr, "%s: %s\n", target.c_str(), client.status().ToString().c_str());
    return 1;
  }
  granary::Client& c = **client;
  auto files = c.List("", /*recursive=*/true);
  if (!files.ok()) {
    std::fprintf(stderr, "list: %s\n", files.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> order;
  for (const auto& f : *files) order.push_back(f.path);
  std::shuffle(order.begin(), order.end(), std::mt19937(42));
  if (auto s = c.Prefetch(order, 256); !s.ok()) {
    std::fprintf(stderr, "prefetch: %s\n", s.ToString().c_str());
    return 1;
  }

  std::atomic<size_t> next{0}, bytes{0}, errors{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> readers;
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&] {
      for (size_t i; (i = next++) < order.size();) {
        auto data = c.ReadWhole(order[i]);
        if (!data.ok()) {
          if (errors++ < 5) std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
          continue;
        }
        bytes += data->size();
      }
    });
  }
  for (auto& t : readers) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu files, %.1f MB in %.2f s: %.0f files/s, %.1f MB/s, %zu errors\n", order.size(),
              bytes / 1e6, s, order.size() / s, bytes / 1e6 / s, errors.load());
  return errors == 0 ? 0 : 1;
}
