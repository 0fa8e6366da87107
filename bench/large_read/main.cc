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
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "large_read/file_read.h"
#include "large_read/http_get.h"
#include "large_read/manifest.h"
#include "large_read/run_report.h"

namespace granary::bench {
namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitFailedFiles = 2;

std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// --spec PREFIX:COUNT:BYTES -> files PREFIX-0000.bin ... in the manifest.
int RunGenerate(const std::string& root, const std::vector<std::string>& specs, uint64_t seed,
                const std::string& manifest_path) {
  Manifest m{.seed = seed};
  for (const std::string& spec : specs) {
    // PREFIX:COUNT:BYTES, where PREFIX may hold ':' itself.
    const size_t a = spec.rfind(':');
    const size_t b = a == std::string::npos || a == 0 ? std::string::npos : spec.rfind(':', a - 1);
    int count = -1;
    uint64_t bytes = 0;
    if (b != std::string::npos) {
      try {
        count = std::stoi(spec.substr(b + 1, a - b - 1));
        bytes = std::stoull(spec.substr(a + 1));
      } catch (const std::logic_error&) {
        count = -1;
      }
    }
    if (count < 0) {
      std::fprintf(stderr, "granary_large_read: --spec %s: expected PREFIX:COUNT:BYTES\n",
                   spec.c_str());
      return kExitBadInput;
    }
    const std::string prefix = spec.substr(0, b);
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
               j["errors"].get<uint64_t>() ? ": " : "",
               j["first_error"].get<std::string>().c_str());
  return j["errors"].get<uint64_t>() == 0 ? 0 : kExitFailedFiles;
}

// The flags of every subcommand.
struct Flags {
  std::string root, manifest, select, io = "read";
  std::vector<std::string> specs;
  uint64_t seed = 1;
  int threads = 8, read_kib = 256;
  uint64_t range_mib = 0;
  GetOptions get;
};

// The selected manifest entries; empty after printing why there are none.
std::vector<ManifestEntry> SelectedEntries(const Flags& f) {
  Manifest m;
  std::string error;
  if (!LoadManifest(f.manifest, &m, &error)) {
    std::fprintf(stderr, "granary_large_read: %s\n", error.c_str());
    return {};
  }
  std::vector<ManifestEntry> entries = Select(m, f.select);
  if (entries.empty()) {
    std::fprintf(stderr, "granary_large_read: no manifest entry starts with '%s'\n",
                 f.select.c_str());
  }
  return entries;
}

int RunRead(const Flags& f) {
  FileReadOptions o{.root = f.root,
                    .read_bytes = static_cast<size_t>(f.read_kib) << 10,
                    .io = f.io == "mmap"     ? IoMode::kMmap
                          : f.io == "direct" ? IoMode::kDirect
                                             : IoMode::kRead};
  if (std::string bad = ValidateFileRead(o); !bad.empty()) {
    std::fprintf(stderr, "granary_large_read: %s\n", bad.c_str());
    return kExitBadInput;
  }
  const std::vector<ManifestEntry> entries = SelectedEntries(f);
  if (entries.empty()) return kExitBadInput;
  RunReport r = RunParallel(entries, f.threads, [&] { return MakeFileReader(o); });
  r.read_bytes = o.read_bytes;
  return Report(std::move(r), f.io);
}

int RunGet(const Flags& f) {
  GetOptions o = f.get;
  o.access_key = Env("AWS_ACCESS_KEY_ID");
  o.secret_key = Env("AWS_SECRET_ACCESS_KEY");
  o.region = Env("AWS_REGION", "us-east-1");
  o.buffer_bytes = static_cast<size_t>(f.read_kib) << 10;
  o.range_bytes = f.range_mib << 20;
  if (std::string bad = ValidateGet(o); !bad.empty()) {
    std::fprintf(stderr, "granary_large_read: %s\n", bad.c_str());
    return kExitBadInput;
  }
  const std::vector<ManifestEntry> entries = SelectedEntries(f);
  if (entries.empty()) return kExitBadInput;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  RunReport r = RunParallel(entries, f.threads, [&] { return MakeObjectGetter(o); });
  r.read_bytes = o.buffer_bytes;
  const int rc = Report(std::move(r), o.range_bytes ? "get-ranges" : "get");
  curl_global_cleanup();
  return rc;
}

// --manifest, --select, --threads and --read-kib of read and get.
void AddReadFlags(CLI::App* c, Flags* f) {
  c->add_option("--manifest", f->manifest, "manifest written by gen")->required();
  c->add_option("--select", f->select, "only entries whose path starts with this");
  c->add_option("--threads", f->threads, "parallel readers, each reading whole files")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  c->add_option("--read-kib", f->read_kib, "KiB per read (read: per read(2); get: receive buffer)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
}

}  // namespace
}  // namespace granary::bench

int main(int argc, char** argv) {
  namespace gb = granary::bench;
  gb::Flags f;
  CLI::App app{"granary_large_read: generate large objects, read them back verified"};
  app.require_subcommand(1);

  CLI::App* gen = app.add_subcommand("gen", "write the data set and its manifest");
  gen->add_option("--root", f.root, "directory to write into")->required();
  gen->add_option("--spec", f.specs, "PREFIX:COUNT:BYTES (files PREFIX-0000.bin...)")->required();
  gen->add_option("--seed", f.seed, "content seed")->capture_default_str();
  gen->add_option("--manifest", f.manifest, "manifest to write (JSON)")->required();

  CLI::App* read = app.add_subcommand("read", "read files under a directory");
  gb::AddReadFlags(read, &f);
  read->add_option("--root", f.root, "directory the manifest's paths are relative to")->required();
  read->add_option("--io", f.io, "read, mmap or direct")
      ->check(CLI::IsMember({"read", "mmap", "direct"}))
      ->capture_default_str();

  CLI::App* get = app.add_subcommand("get", "GET objects from an S3-compatible endpoint");
  gb::AddReadFlags(get, &f);
  get->add_option("--endpoint", f.get.endpoint, "http://HOST:PORT")->required();
  get->add_option("--bucket", f.get.bucket, "bucket")->required();
  get->add_option("--prefix", f.get.prefix, "key prefix (ending in /)");
  get->add_option("--range-mib", f.range_mib,
                  "ranged GETs of this many MiB (0 = one GET per object)")
      ->capture_default_str();
  get->add_option("--parallel", f.get.parallel, "ranged GETs in flight per object")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (gen->parsed()) return gb::RunGenerate(f.root, f.specs, f.seed, f.manifest);
  return read->parsed() ? gb::RunRead(f) : gb::RunGet(f);
}
