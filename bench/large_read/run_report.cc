#include "large_read/run_report.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace granary::bench {
namespace {

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

}  // namespace

RunReport RunParallel(const std::vector<ManifestEntry>& entries, int threads,
                      const std::function<FileWorker()>& make_worker) {
  RunReport r{.threads = threads};
  r.files.resize(entries.size());
  std::atomic<size_t> next{0};
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      FileWorker work = make_worker();
      for (size_t i = next++; i < entries.size(); i = next++) r.files[i] = work(entries[i]);
    });
  }
  for (std::thread& t : pool) t.join();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_seconds = ProcessCpuSeconds() - cpu0;
  return r;
}

nlohmann::json ReportJson(const RunReport& r) {
  uint64_t bytes = 0, requests = 0, errors = 0;
  std::string first_error;
  nlohmann::json files = nlohmann::json::array();
  for (const FileOutcome& f : r.files) {
    bytes += f.bytes;
    requests += f.requests;
    if (!f.error.empty()) {
      ++errors;
      if (first_error.empty()) first_error = f.path + ": " + f.error;
    }
    files.push_back({{"path", f.path},
                     {"bytes", f.bytes},
                     {"seconds", f.seconds},
                     {"requests", f.requests},
                     {"error", f.error}});
  }
  const double gib = static_cast<double>(bytes) / (1u << 30);
  return {{"mode", r.mode},
          {"threads", r.threads},
          {"read_bytes", r.read_bytes},
          {"files", r.files.size()},
          {"bytes", bytes},
          {"seconds", r.seconds},
          {"mib_per_s", r.seconds > 0 ? static_cast<double>(bytes) / (1u << 20) / r.seconds : 0},
          {"cpu_seconds", r.cpu_seconds},
          {"cpu_s_per_gib", gib > 0 ? r.cpu_seconds / gib : 0},
          {"requests", requests},
          {"errors", errors},
          {"first_error", first_error},
          {"per_file", files}};
}

std::string Verify(const ManifestEntry& e, uint64_t bytes, const StreamChecksum& sum) {
  if (bytes != e.bytes) {
    return "read " + std::to_string(bytes) + " bytes of " + std::to_string(e.bytes);
  }
  std::string got = sum.Hex();
  return got == e.xxh3 ? "" : "checksum " + got + ", expected " + e.xxh3;
}

}  // namespace granary::bench
