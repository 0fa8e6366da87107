// granary_large_read: the large-object reader of bench/large_read/large_read.py.
//
//   granary_large_read gen  --root DIR --spec shards/shard:32:134217728 --spec big/big:1:1073741824
//                           --manifest M.json
//   granary_large_read read --root DIR --manifest M.json --select shards/ --threads 8
//                           [--read-kib 256] [--io read|mmap|direct]
//   granary_large_read get  --endpoint URL --bucket B --prefix P/ --manifest M.json
//                           --select big/ --threads 1 [--range-mib 8 --parallel 8]
//
// gen writes deterministic files (manifest.h) and their manifest. read and get
// read every selected file whole, N threads each taking the next file, verify
// size and XXH3-64 of every file, and print one JSON report on stdout (MiB/s
// over the wall time of the pass, this process's CPU per GiB, requests,
// errors, every file). get signs with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
// (unsigned without them) in AWS_REGION (default us-east-1).
//
// Exit status: 0 when every file was read and verified; 1 on bad flags or a
// manifest that cannot be read; 2 when a file failed (the report names it).
#include <curl/curl.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "large_read/file_read.h"
#include "large_read/http_get.h"
#include "large_read/manifest.h"
#include "large_read/run_report.h"

namespace granary::bench {
namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitFailedFiles = 2;

std::string Env(const char* name, std::string fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// --spec PREFIX:COUNT:BYTES -> files PREFIX-0000.bin ... in the manifest.
int RunGenerate(const std::string& root, const std::vector<std::string>& specs, uint64_t seed,
                const std::string& manifest_path) {
  Manifest m{.seed = seed};
  for (const std::string& spec : specs) {
    size_t a = spec.rfind(':');
    size_t b = a == std::string::npos || a == 0 ? std::string::npos : spec.rfind(':', a - 1);
    if (b == std::string::npos) {
      std::fprintf(stderr, "granary_large_read: --spec %s: expected PREFIX:COUNT:BYTES\n",
                   spec.c_str());
      return kExitBadInput;
    }
    const std::string prefix = spec.substr(0, b);
    const int count = std::stoi(spec.substr(b + 1, a - b - 1));
    const uint64_t bytes = std::stoull(spec.substr(a + 1));
    for (int i = 0; i < count; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "-%04d.bin", i);
      m.files.push_back({.path = prefix + name, .bytes = bytes});
    }
  }
  // Files are generated in parallel, one thread per CPU, each taking the next file.
  std::vector<std::string> errors(m.files.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < m.files.size(); i = next++) {
        m.files[i] = GenerateFile(root, m.files[i].path, m.files[i].bytes, seed, &errors[i]);
      }
    });
  }
  for (std::thread& t : pool) t.join();
  for (const std::string& e : errors) {
    if (!e.empty()) {
      std::fprintf(stderr, "granary_large_read gen: %s\n", e.c_str());
      return kExitFailedFiles;
    }
  }
  std::ofstream(manifest_path) << ManifestToJson(m) << "\n";
  return 0;
}

int Report(RunReport r, const std::string& mode) {
  r.mode = mode;
  nlohmann::json j = ReportJson(r);
  std::printf("%s\n", j.dump(1).c_str());
  std::fprintf(stderr, "%s: %llu files, %.1f MiB/s, %.2f CPU s/GiB, %llu errors%s%s\n",
               mode.c_str(), static_cast<unsigned long long>(j["files"].get<uint64_t>()),
               j["mib_per_s"].get<double>(), j["cpu_s_per_gib"].get<double>(),
               static_cast<unsigned long long>(j["errors"].get<uint64_t>()),
               j["errors"].get<uint64_t>() ? ": " : "", j["first_error"].get<std::string>().c_str());
  return j["errors"].get<uint64_t>() == 0 ? 0 : kExitFailedFiles;
}

}  // namespace
}  // namespace granary::bench

int main(int argc, char** argv) {
  namespace gb = granary::bench;
  CLI::App app{"granary_large_read: generate large objects, read them back verified"};
  app.require_subcommand(1);

  std::string root, manifest_path, select, io = "read";
  std::vector<std::string> specs;
  uint64_t seed = 1;
  int threads = 8, read_kib = 256;
  gb::GetOptions get;
  uint64_t range_mib = 0;

  CLI::App* gen = app.add_subcommand("gen", "write the data set and its manifest");
  gen->add_option("--root", root, "directory to write into")->required();
  gen->add_option("--spec", specs, "PREFIX:COUNT:BYTES (files PREFIX-0000.bin...)")->required();
  gen->add_option("--seed", seed, "content seed")->capture_default_str();
  gen->add_option("--manifest", manifest_path, "manifest to write (JSON)")->required();

  auto common = [&](CLI::App* c) {
    c->add_option("--manifest", manifest_path, "manifest written by gen")->required();
    c->add_option("--select", select, "only entries whose path starts with this");
    c->add_option("--threads", threads, "parallel readers, each reading whole files")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    c->add_option("--read-kib", read_kib, "KiB per read (read: per read(2); get: receive buffer)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
  };
  CLI::App* read = app.add_subcommand("read", "read files under a directory");
  common(read);
  read->add_option("--root", root, "directory the manifest's paths are relative to")->required();
  read->add_option("--io", io, "read, mmap or direct")
      ->check(CLI::IsMember({"read", "mmap", "direct"}))
      ->capture_default_str();

  CLI::App* getc = app.add_subcommand("get", "GET objects from an S3-compatible endpoint");
  common(getc);
  getc->add_option("--endpoint", get.endpoint, "http://HOST:PORT")->required();
  getc->add_option("--bucket", get.bucket, "bucket")->required();
  getc->add_option("--prefix", get.prefix, "key prefix (ending in /)");
  getc->add_option("--range-mib", range_mib, "ranged GETs of this many MiB (0 = one GET per object)")
      ->capture_default_str();
  getc->add_option("--parallel", get.parallel, "ranged GETs in flight per object")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (gen->parsed()) return gb::RunGenerate(root, specs, seed, manifest_path);

  gb::Manifest m;
  std::string error;
  if (!gb::LoadManifest(manifest_path, &m, &error)) {
    std::fprintf(stderr, "granary_large_read: %s\n", error.c_str());
    return gb::kExitBadInput;
  }
  const std::vector<gb::ManifestEntry> entries = gb::Select(m, select);
  if (entries.empty()) {
    std::fprintf(stderr, "granary_large_read: no manifest entry starts with '%s'\n", select.c_str());
    return gb::kExitBadInput;
  }
  const size_t read_bytes = static_cast<size_t>(read_kib) << 10;
  if (read->parsed()) {
    gb::FileReadOptions o{.root = root,
                          .read_bytes = read_bytes,
                          .io = io == "mmap"     ? gb::IoMode::kMmap
                                : io == "direct" ? gb::IoMode::kDirect
                                                 : gb::IoMode::kRead};
    if (std::string bad = gb::ValidateFileRead(o); !bad.empty()) {
      std::fprintf(stderr, "granary_large_read: %s\n", bad.c_str());
      return gb::kExitBadInput;
    }
    gb::RunReport r = gb::RunParallel(entries, threads, [&] { return gb::MakeFileReader(o); });
    r.read_bytes = read_bytes;
    return gb::Report(std::move(r), io);
  }
  get.access_key = gb::Env("AWS_ACCESS_KEY_ID");
  get.secret_key = gb::Env("AWS_SECRET_ACCESS_KEY");
  get.region = gb::Env("AWS_REGION", "us-east-1");
  get.buffer_bytes = read_bytes;
  get.range_bytes = range_mib << 20;
  if (std::string bad = gb::ValidateGet(get); !bad.empty()) {
    std::fprintf(stderr, "granary_large_read: %s\n", bad.c_str());
    return gb::kExitBadInput;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  gb::RunReport r = gb::RunParallel(entries, threads, [&] { return gb::MakeObjectGetter(get); });
  r.read_bytes = read_bytes;
  int rc = gb::Report(std::move(r), get.range_bytes ? "get-ranges" : "get");
  curl_global_cleanup();
  return rc;
}
