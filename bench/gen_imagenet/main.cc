// gen_imagenet: writes an ImageNet-like training set (PaddleClas layout) of
// valid, distinct JPEGs with ImageNet's size distribution, deterministic from
// --seed, to a directory or an S3 bucket; or verifies one (--verify DIR).
//
//   gen_imagenet --count 128660 --out /data/imagenet --seed 1 --threads 2
//   gen_imagenet --count 10000 --s3-endpoint http://127.0.0.1:9000 --bucket b --prefix imagenet
//   gen_imagenet --verify /data/imagenet
//
// Prints a summary (count, bytes, mean/median/p99 size, elapsed) and, with
// --json FILE, writes it machine-readably. Exit status 0 = success.
//
// Threads: --threads workers each own an encoder and pull file indexes from
// one atomic counter; output does not depend on the thread count.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/units.h"
#include "gen_imagenet/dataset_plan.h"
#include "gen_imagenet/output_sink.h"
#include "gen_imagenet/size_stats.h"
#include "gen_imagenet/synth_jpeg.h"
#include "gen_imagenet/verify.h"

namespace granary::bench {
namespace {

struct GenOptions {
  PlanOptions plan;
  int quality = 90;       // JPEG quality of the encoded images
  int threads = 0;        // 0 = hardware concurrency
  SinkOptions sink;       // where files go
  std::string json_path;  // --json: summary file ("" = none)
  bool quiet = false;     // no progress lines on stderr
};

struct GenState {
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> bytes{0};
  std::vector<uint64_t> sizes;  // per file; each slot written by exactly one worker
  std::mutex mu;                // guards first_error
  Status first_error;
  std::atomic<bool> failed{false};
};

void Worker(const DatasetPlan& plan, const GenOptions& opt, const NoiseTile& tile, double bpp,
            OutputSink& sink, GenState& st) {
  auto record_error = [&](const Status& s) {
    std::lock_guard lock(st.mu);
    if (st.first_error.ok()) st.first_error = s;
    st.failed = true;
  };
  auto enc = SynthJpegEncoder::Create(opt.quality, &tile);
  if (!enc.ok()) return record_error(enc.status());
  for (uint64_t i = st.next++; i < plan.count() && !st.failed; i = st.next++) {
    FileSpec spec = plan.File(i);
    std::string tag = "granary gen_imagenet seed=" + std::to_string(opt.plan.seed) +
                      " index=" + std::to_string(i);
    auto jpeg = (*enc)->Encode(spec, bpp, tag);
    if (!jpeg.ok()) return record_error(jpeg.status().WithContext(spec.rel_path));
    Status put = sink.Put(spec.rel_path, jpeg->bytes);
    if (!put.ok()) return record_error(put);
    st.sizes[i] = jpeg->bytes.size();
    st.bytes += jpeg->bytes.size();
    ++st.done;
  }
}

std::string TrainList(const DatasetPlan& plan) {
  std::string out;
  out.reserve(plan.count() * 48);
  for (uint64_t i = 0; i < plan.count(); ++i) {
    FileSpec f = plan.File(i);
    out += f.rel_path + " " + std::to_string(f.label) + "\n";
  }
  return out;
}

nlohmann::json SummaryJson(const SizeSummary& s) {
  return {{"count", s.count},           {"total_bytes", s.total_bytes},
          {"mean_bytes", s.mean_bytes}, {"median_bytes", s.median_bytes},
          {"p99_bytes", s.p99_bytes},   {"max_bytes", s.max_bytes}};
}

void PrintSummary(const SizeSummary& s) {
  std::printf("count        %llu\n", static_cast<unsigned long long>(s.count));
  std::printf("total_bytes  %llu (%s)\n", static_cast<unsigned long long>(s.total_bytes),
              FormatSize(s.total_bytes).c_str());
  std::printf("mean_bytes   %.0f (%s)\n", s.mean_bytes,
              FormatSize(static_cast<uint64_t>(s.mean_bytes)).c_str());
  std::printf("median_bytes %llu (%s)\n", static_cast<unsigned long long>(s.median_bytes),
              FormatSize(s.median_bytes).c_str());
  std::printf("p99_bytes    %llu (%s)\n", static_cast<unsigned long long>(s.p99_bytes),
              FormatSize(s.p99_bytes).c_str());
  std::printf("max_bytes    %llu (%s)\n", static_cast<unsigned long long>(s.max_bytes),
              FormatSize(s.max_bytes).c_str());
}

Status WriteJson(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return Status::Ok();
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return IoError("--json " + path + ": cannot write");
  return Status::Ok();
}

// Prints progress to stderr every 5 s until `stop` is set.
class ProgressPrinter {
 public:
  ProgressPrinter(const GenState& st, uint64_t total, bool quiet) {
    if (quiet) return;
    thread_ = std::thread([this, &st, total] {
      auto start = std::chrono::steady_clock::now();
      std::unique_lock lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::seconds(5), [this] { return stop_; })) {
        double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "gen_imagenet: %llu/%llu files, %s, %.0f files/s\n",
                     static_cast<unsigned long long>(st.done.load()),
                     static_cast<unsigned long long>(total), FormatSize(st.bytes.load()).c_str(),
                     st.done.load() / secs);
      }
    });
  }
  ~ProgressPrinter() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;  // guards stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

Status Generate(const GenOptions& opt) {
  ASSIGN_OR_RETURN(auto plan, DatasetPlan::Create(opt.plan));
  ASSIGN_OR_RETURN(auto sink, OpenSink(opt.sink));
  NoiseTile tile(opt.plan.seed);
  ASSIGN_OR_RETURN(auto probe, SynthJpegEncoder::Create(opt.quality, &tile));
  ASSIGN_OR_RETURN(double bpp, probe->CalibrateBytesPerPixel());
  for (const auto& wnid : plan.wnids()) RETURN_IF_ERROR(sink->PrepareDir("train/" + wnid));

  auto start = std::chrono::steady_clock::now();
  GenState st;
  st.sizes.resize(plan.count());
  int threads = opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
  {
    ProgressPrinter progress(st, plan.count(), opt.quiet);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] { Worker(plan, opt, tile, bpp, *sink, st); });
    }
    for (auto& w : workers) w.join();
  }
  RETURN_IF_ERROR(st.first_error);
  RETURN_IF_ERROR(sink->Put("train_list.txt", TrainList(plan)));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  SizeSummary s = Summarize(st.sizes);
  std::printf("destination  %s\n", sink->Describe().c_str());
  std::printf("classes      %u\n", plan.classes());
  PrintSummary(s);
  std::printf("elapsed_s    %.2f\n", secs);
  std::printf("files_per_s  %.0f\n", s.count / secs);
  nlohmann::json j = SummaryJson(s);
  j["destination"] = sink->Describe();
  j["classes"] = plan.classes();
  j["seed"] = opt.plan.seed;
  j["threads"] = threads;
  j["elapsed_s"] = secs;
  return WriteJson(opt.json_path, j);
}

Status Verify(const std::string& dir, uint64_t decode_every, const std::string& json_path) {
  ASSIGN_OR_RETURN(auto report, VerifyDataset(dir, decode_every));
  std::printf("classes      %llu\n", static_cast<unsigned long long>(report.classes));
  PrintSummary(report.sizes);
  std::printf("decoded      %llu\n", static_cast<unsigned long long>(report.decoded));
  std::printf("duplicates   %llu\n", static_cast<unsigned long long>(report.duplicates));
  for (const auto& p : report.problems) std::printf("problem      %s\n", p.c_str());
  nlohmann::json j = SummaryJson(report.sizes);
  j["classes"] = report.classes;
  j["decoded"] = report.decoded;
  j["duplicates"] = report.duplicates;
  j["problems"] = report.problems;
  RETURN_IF_ERROR(WriteJson(json_path, j));
  if (!report.problems.empty()) {
    return Corruption(dir + ": " + std::to_string(report.problems.size()) + "+ problems (above)");
  }
  return Status::Ok();
}

}  // namespace
}  // namespace granary::bench

int main(int argc, char** argv) {
  using granary::bench::GenOptions;
  GenOptions opt;
  std::string verify_dir, median = "96000", tail_max = "4000000";
  uint64_t decode_every = 1;
  CLI::App app{"gen_imagenet: ImageNet-like JPEG training set (PaddleClas layout)"};
  app.add_option("--count", opt.plan.count, "files to generate (1..1281167)")->default_val(1000);
  app.add_option("--classes", opt.plan.classes, "class folders (default min(1000, count))");
  app.add_option("--seed", opt.plan.seed, "everything derives from it")->default_val(1);
  app.add_option("--out", opt.sink.dir, "output directory");
  app.add_option("--s3-endpoint", opt.sink.s3_endpoint, "upload to this S3 endpoint instead");
  app.add_option("--bucket", opt.sink.bucket, "S3 bucket (created if missing)");
  app.add_option("--prefix", opt.sink.prefix, "S3 key prefix (the dataset root)");
  app.add_option("--threads", opt.threads, "worker threads (default: all cores)");
  app.add_option("--quality", opt.quality, "JPEG quality")->default_val(90);
  app.add_option("--median-size", median,
                 "median file size of the lognormal body (e.g. 96000 or 94KiB)");
  app.add_option("--sigma", opt.plan.sigma, "lognormal sigma")->default_val(0.5);
  app.add_option("--tail-fraction", opt.plan.tail_fraction, "share of multi-MB files")
      ->default_val(0.002);
  app.add_option("--max-size", tail_max, "largest file size (heavy tail upper end)");
  app.add_option("--verify", verify_dir, "check an existing tree instead of generating");
  app.add_option("--decode-every", decode_every, "--verify: decode every k-th file (0 = none)")
      ->default_val(1);
  app.add_option("--json", opt.json_path, "write the summary as JSON to this file");
  app.add_flag("--quiet", opt.quiet, "no progress lines");
  CLI11_PARSE(app, argc, argv);

  granary::Status status;
  if (!verify_dir.empty()) {
    status = granary::bench::Verify(verify_dir, decode_every, opt.json_path);
  } else {
    auto m = granary::ParseSize(median);
    auto t = granary::ParseSize(tail_max);
    if (!m.ok() || !t.ok()) {
      status = granary::InvalidArgument("--median-size/--max-size: " +
                                        (m.ok() ? t.status() : m.status()).message());
    } else {
      opt.plan.median_bytes = static_cast<double>(*m);
      opt.plan.tail_max_bytes = static_cast<double>(*t);
      opt.plan.tail_min_bytes = std::min(opt.plan.tail_min_bytes, opt.plan.tail_max_bytes);
      status = granary::bench::Generate(opt);
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "gen_imagenet: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
