#include "reader/epoch_runner.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include "gen_imagenet/dataset_plan.h"
#include "reader/decode_augment.h"

namespace granary::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

// Fisher-Yates with our seeded Rng (std::shuffle's output varies by library).
std::vector<uint32_t> ShuffledOrder(size_t n, uint64_t seed) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(seed);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.Next() % i]);
  return order;
}

struct SharedEpoch {
  const std::vector<std::string>* files;
  const std::vector<uint32_t>* order;
  const ReaderOptions* options;
  size_t limit;  // files to hand out
  SteadyClock::time_point deadline;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> files_done{0}, bytes{0}, errors{0};
  std::mutex mu;  // guards latencies_us, first_error
  std::vector<uint32_t> latencies_us;
  std::string first_error;
};

// Reads `path` whole into `buf` (grown only when `keep` asks for the whole
// file in memory). Returns bytes read, or -errno.
ssize_t ReadWhole(const std::string& path, std::vector<char>& buf, size_t chunk, bool keep) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t total = 0;
  for (;;) {
    size_t at = keep ? total : 0;
    if (buf.size() < at + chunk) buf.resize(at + chunk);
    ssize_t n = ::read(fd, buf.data() + at, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return -err;
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
  }
  ::close(fd);
  return static_cast<ssize_t>(total);
}

void ReaderThread(SharedEpoch& ep, int thread_index, int epoch) {
  const ReaderOptions& opt = *ep.options;
  std::vector<char> buf(opt.buffer_bytes);
  std::vector<uint32_t> lat;
  std::unique_ptr<DecodeAugmenter> aug;
  if (opt.decode) {
    auto made = DecodeAugmenter::Create();
    if (made.ok()) aug = std::move(*made);
  }
  Rng rng(Mix64(opt.seed ^ (static_cast<uint64_t>(epoch) << 32) ^ thread_index));
  auto fail = [&](const std::string& what) {
    ++ep.errors;
    std::lock_guard lock(ep.mu);
    if (ep.first_error.empty()) ep.first_error = what;
  };
  for (size_t i = ep.next++; i < ep.limit; i = ep.next++) {
    if (opt.limit_seconds > 0 && SteadyClock::now() >= ep.deadline) break;
    const std::string& path = (*ep.files)[(*ep.order)[i]];
    auto start = SteadyClock::now();
    ssize_t n = ReadWhole(path, buf, opt.buffer_bytes, opt.decode);
    if (n < 0) {
      fail(path + ": " + std::strerror(static_cast<int>(-n)));
      continue;
    }
    if (opt.decode) {
      Status s = aug ? aug->Process({buf.data(), static_cast<size_t>(n)}, rng)
                     : Internal("cannot create a JPEG decoder");
      if (!s.ok()) {
        fail(path + ": " + s.ToString());
        continue;
      }
    }
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - start);
    lat.push_back(static_cast<uint32_t>(std::min<int64_t>(us.count(), UINT32_MAX)));
    ++ep.files_done;
    ep.bytes += static_cast<uint64_t>(n);
  }
  std::lock_guard lock(ep.mu);
  ep.latencies_us.insert(ep.latencies_us.end(), lat.begin(), lat.end());
}

double Percentile(const std::vector<uint32_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
  return sorted[i];
}

}  // namespace

EpochResult RunEpoch(const std::vector<std::string>& files, const ReaderOptions& options,
                     int epoch) {
  std::vector<uint32_t> order = ShuffledOrder(files.size(), Mix64(options.seed) ^ Mix64(epoch));
  SharedEpoch ep{.files = &files, .order = &order, .options = &options};
  ep.limit =
      options.max_files > 0 ? std::min<size_t>(files.size(), options.max_files) : files.size();
  double cpu0 = CpuSeconds();
  auto start = SteadyClock::now();
  ep.deadline = start + std::chrono::duration_cast<SteadyClock::duration>(
                            std::chrono::duration<double>(options.limit_seconds));
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, options.threads); ++t) {
    threads.emplace_back([&ep, t, epoch] { ReaderThread(ep, t, epoch); });
  }
  for (auto& t : threads) t.join();

  EpochResult r;
  r.epoch = epoch;
  r.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  r.files = ep.files_done;
  r.bytes = ep.bytes;
  r.errors = ep.errors;
  r.first_error = ep.first_error;
  r.images_per_s = r.seconds > 0 ? r.files / r.seconds : 0;
  r.mb_per_s = r.seconds > 0 ? r.bytes / r.seconds / 1e6 : 0;
  r.cpu_us_per_file = r.files > 0 ? (CpuSeconds() - cpu0) * 1e6 / r.files : 0;
  std::sort(ep.latencies_us.begin(), ep.latencies_us.end());
  r.p50_us = Percentile(ep.latencies_us, 0.50);
  r.p99_us = Percentile(ep.latencies_us, 0.99);
  if (!ep.latencies_us.empty()) {
    r.mean_us = std::accumulate(ep.latencies_us.begin(), ep.latencies_us.end(), 0.0) /
                ep.latencies_us.size();
  }
  return r;
}

}  // namespace granary::bench
