// granary_reader: reads a data set the way a training job does — whole files,
// a fresh shuffled order every epoch, N parallel readers — and prints per
// epoch images/s, MB/s, p50/p99 per-file latency, reader CPU per file and
// errors. --decode adds JPEG decode + RandomResizedCrop 224 + flip.
//
//   granary_reader /mnt/imagenet/train --threads 16 --epochs 2 --json out.json
//   granary_reader --list /mnt/imagenet/train_list.txt --decode --limit-seconds 30
//
// Exit status: 0 when every file of every epoch was read; 1 on bad flags or
// when no file could be listed; 2 when some reads failed (the table says how
// many).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reader/epoch_runner.h"
#include "reader/file_list.h"

namespace granary::bench {
namespace {

nlohmann::json EpochJson(const EpochResult& r) {
  return {{"epoch", r.epoch},
          {"files", r.files},
          {"bytes", r.bytes},
          {"errors", r.errors},
          {"seconds", r.seconds},
          {"images_per_s", r.images_per_s},
          {"mb_per_s", r.mb_per_s},
          {"p50_us", r.p50_us},
          {"p99_us", r.p99_us},
          {"mean_us", r.mean_us},
          {"cpu_us_per_file", r.cpu_us_per_file},
          {"first_error", r.first_error}};
}

void PrintHeader() {
  std::printf("%-6s %9s %7s %8s %10s %9s %9s %9s %11s\n", "epoch", "files", "errors", "seconds",
              "images/s", "MB/s", "p50_us", "p99_us", "cpu_us/file");
}

void PrintEpoch(const EpochResult& r) {
  std::printf("%-6d %9llu %7llu %8.2f %10.0f %9.1f %9.0f %9.0f %11.1f\n", r.epoch,
              static_cast<unsigned long long>(r.files), static_cast<unsigned long long>(r.errors),
              r.seconds, r.images_per_s, r.mb_per_s, r.p50_us, r.p99_us, r.cpu_us_per_file);
  if (!r.first_error.empty()) std::printf("       first error: %s\n", r.first_error.c_str());
  std::fflush(stdout);
}

}  // namespace
}  // namespace granary::bench

int main(int argc, char** argv) {
  namespace gb = granary::bench;
  gb::ReaderOptions opt;
  std::string dir, list, root, json_path;
  int epochs = 1;
  CLI::App app{"granary_reader: read a data set in the training pattern"};
  app.add_option("dir", dir, "directory to read (every regular file under it)");
  app.add_option("--list", list, "PaddleClas list file (train_list.txt) instead of a directory");
  app.add_option("--root", root, "--list: directory the listed paths are relative to");
  app.add_option("--threads", opt.threads, "parallel readers")
      ->default_val(16)
      ->check(CLI::Range(1, 4096));
  app.add_option("--epochs", epochs, "passes over the data")
      ->default_val(1)
      ->check(CLI::Range(1, 100000));
  app.add_option("--seed", opt.seed, "shuffle seed (epoch e uses (seed, e))")->default_val(1);
  app.add_flag("--decode", opt.decode, "JPEG decode + RandomResizedCrop 224 + flip + normalize");
  app.add_option("--limit-seconds", opt.limit_seconds, "per epoch: stop after this long")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-files", opt.max_files, "per epoch: read at most this many files");
  app.add_option("--json", json_path, "write config and per-epoch results as JSON");
  CLI11_PARSE(app, argc, argv);

  if (dir.empty() == list.empty()) {
    std::fprintf(stderr, "granary_reader: give exactly one of DIR or --list FILE\n");
    return 1;
  }
  auto files = list.empty() ? gb::ListTree(dir) : gb::ReadListFile(list, root);
  if (!files.ok() || files->empty()) {
    std::fprintf(stderr, "granary_reader: %s\n",
                 files.ok() ? (list.empty() ? dir : list).append(": no files").c_str()
                            : files.status().ToString().c_str());
    return 1;
  }
  std::printf("reading %zu files, %d threads%s\n", files->size(), opt.threads,
              opt.decode ? ", decode" : "");
  gb::PrintHeader();
  nlohmann::json out = {{"source", list.empty() ? dir : list},
                        {"files_listed", files->size()},
                        {"threads", opt.threads},
                        {"seed", opt.seed},
                        {"decode", opt.decode},
                        {"epochs", nlohmann::json::array()}};
  uint64_t errors = 0;
  for (int e = 0; e < epochs; ++e) {
    gb::EpochResult r = gb::RunEpoch(*files, opt, e);
    gb::PrintEpoch(r);
    errors += r.errors;
    out["epochs"].push_back(gb::EpochJson(r));
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "granary_reader: --json %s: cannot write\n", json_path.c_str());
      return 1;
    }
  }
  return errors > 0 ? 2 : 0;
}
