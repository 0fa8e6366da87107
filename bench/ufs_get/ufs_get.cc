// ufs_get: GET throughput of the S3 connector against one endpoint, at
// concurrency 1, 2, 4, ... 64, on ImageNet-sized objects (~110 KB).
//
// Reads whole objects (ranged GET into a reused buffer, as the cache does) in
// random order for --seconds-per-level at each level and prints objects/s,
// MB/s and p50/p99 latency, then `ceiling: <best objects/s> objects/s` for
// other benchmarks to parse. Without --endpoint it starts a local moto_server.
// If the prefix holds fewer than --objects objects, it uploads the missing ones.
//
// Threads: one reader thread per concurrency slot; no shared state but atomics
// and per-thread latency vectors merged after each level.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "common/thread_pool.h"
#include "common/units.h"
#include "ufs/s3_ufs.h"
#ifdef GRANARY_UFS_GET_MOTO
#include "testing/moto_server.h"
#endif

namespace granary {
namespace {

struct Flags {
  std::string endpoint;
  std::string bucket = "bench";
  std::string prefix = "ufs_get/";
  int objects = 2000;
  std::string object_size = "110KiB";
  double seconds_per_level = 3;
  std::vector<int> levels = {1, 2, 4, 8, 16, 32, 64};
};

struct LevelResult {
  int concurrency = 0;
  uint64_t objects = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  double seconds = 0;
  double p50_ms = 0, p99_ms = 0;
};

Status Prepare(S3Ufs& s3, const Flags& f, std::vector<ObjectInfo>& out) {
  ASSIGN_OR_RETURN(uint64_t size, ParseSize(f.object_size));
  auto listed = s3.ListAll(f.prefix);
  if (!listed.ok() && listed.status().code() == Code::kNotFound) {
    RETURN_IF_ERROR(s3.CreateBucket());
    listed = std::vector<ObjectInfo>{};
  }
  RETURN_IF_ERROR(listed.status());
  if (listed->size() < static_cast<size_t>(f.objects)) {
    std::fprintf(stderr, "uploading %d objects of %s to s3://%s/%s ...\n", f.objects,
                 FormatSize(size).c_str(), f.bucket.c_str(), f.prefix.c_str());
    std::string body(size, '\0');
    std::mt19937_64 rng(1);
    for (char& c : body) c = static_cast<char>(rng());
    std::atomic<int> failed{0};
    ParallelFor(f.objects, 32, [&](size_t i) {
      char key[64];
      std::snprintf(key, sizeof(key), "%08zu.jpg", i);
      if (!s3.PutObject(f.prefix + key, body).ok()) failed.fetch_add(1);
    });
    if (failed.load() > 0) return Unavailable(std::to_string(failed.load()) + " uploads failed");
    ASSIGN_OR_RETURN(listed, s3.ListAll(f.prefix));
  }
  out = std::move(*listed);
  if (out.empty()) return NotFound("s3://" + f.bucket + "/" + f.prefix + ": no objects");
  return Status::Ok();
}

LevelResult RunLevel(S3Ufs& s3, const std::vector<ObjectInfo>& objects, int concurrency,
                     double seconds) {
  std::atomic<uint64_t> count{0}, bytes{0}, errors{0};
  std::vector<std::vector<double>> lat(concurrency);
  const auto start = std::chrono::steady_clock::now();
  const auto stop = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t * 7919 + concurrency);
      std::vector<char> buf;
      while (std::chrono::steady_clock::now() < stop) {
        const ObjectInfo& o = objects[rng() % objects.size()];
        buf.resize(std::max<uint64_t>(o.size, 1));
        auto t0 = std::chrono::steady_clock::now();
        auto n = s3.Read(o.key, 0, std::span<char>(buf.data(), buf.size()));
        auto t1 = std::chrono::steady_clock::now();
        if (!n.ok() || *n != o.size) {
          errors.fetch_add(1);
          continue;
        }
        lat[t].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        count.fetch_add(1);
        bytes.fetch_add(*n);
      }
    });
  }
  for (auto& th : threads) th.join();
  LevelResult r{.concurrency = concurrency,
                .objects = count.load(),
                .bytes = bytes.load(),
                .errors = errors.load()};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  if (!all.empty()) {
    r.p50_ms = all[all.size() / 2];
    r.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return r;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"ufs_get: S3 GET throughput vs concurrency (the origin's ceiling)"};
  app.add_option("--endpoint", f.endpoint, "S3 endpoint; empty = start a local moto_server");
  app.add_option("--bucket", f.bucket, "bucket")->capture_default_str();
  app.add_option("--prefix", f.prefix, "key prefix to read (objects uploaded if missing)")
      ->capture_default_str();
  app.add_option("--objects", f.objects, "objects to read (uploaded when fewer exist)")
      ->capture_default_str();
  app.add_option("--object-size", f.object_size, "size of uploaded objects")->capture_default_str();
  app.add_option("--seconds-per-level", f.seconds_per_level, "seconds per concurrency level")
      ->capture_default_str();
  app.add_option("--levels", f.levels, "concurrency levels")->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  UfsOptions opts;
#ifdef GRANARY_UFS_GET_MOTO
  std::unique_ptr<testing::MotoServer> moto;
  if (f.endpoint.empty()) {
    auto started = testing::MotoServer::Start();
    if (!started.ok()) {
      std::fprintf(stderr, "ufs_get: %s\n", started.status().message().c_str());
      return 1;
    }
    moto = std::move(*started);
    f.endpoint = moto->endpoint();
    opts.secrets = {{"accessKeyId", "testing"}, {"secretAccessKey", "testing"}};
  }
#endif
  if (f.endpoint.empty()) {
    std::fprintf(stderr, "ufs_get: --endpoint is required (built without moto support)\n");
    return 2;
  }
  opts.options["endpoint"] = f.endpoint;
  auto resolved = ResolveS3Options(opts);
  if (!resolved.ok()) {
    std::fprintf(stderr, "ufs_get: %s\n", resolved.status().message().c_str());
    return 2;
  }
  S3Ufs s3(f.bucket, *resolved);
  std::vector<ObjectInfo> objects;
  if (Status s = Prepare(s3, f, objects); !s.ok()) {
    std::fprintf(stderr, "ufs_get: %s\n", s.message().c_str());
    return 1;
  }
  uint64_t total = 0;
  for (const auto& o : objects) total += o.size;
  std::printf("endpoint %s  s3://%s/%s  %zu objects, mean %s\n", f.endpoint.c_str(),
              f.bucket.c_str(), f.prefix.c_str(), objects.size(),
              FormatSize(total / objects.size()).c_str());
  std::printf("%11s %12s %10s %9s %9s %7s\n", "concurrency", "objects/s", "MB/s", "p50 ms",
              "p99 ms", "errors");
  double best = 0;
  for (int c : f.levels) {
    LevelResult r = RunLevel(s3, objects, std::max(1, c), f.seconds_per_level);
    const double ops = r.objects / r.seconds;
    best = std::max(best, ops);
    std::printf("%11d %12.0f %10.1f %9.2f %9.2f %7llu\n", r.concurrency, ops,
                r.bytes / r.seconds / 1e6, r.p50_ms, r.p99_ms,
                static_cast<unsigned long long>(r.errors));
    std::fflush(stdout);
  }
  std::printf("ceiling: %.0f objects/s\n", best);
  return 0;
}

}  // namespace
}  // namespace granary

int main(int argc, char** argv) { return granary::Main(argc, argv); }
