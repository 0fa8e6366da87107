// `granary load TARGET [--list FILE] [--threads N] [--check] [--quiet] [--background]`:
// warms the cache of a running mount through its daemon's socket.
// Progress goes to stderr (a \r line on a terminal, a line every few seconds
// otherwise); the final check goes to stdout. Ctrl-C closes the connection,
// which cancels the load in the daemon. Exit 0 only if everything requested is cached.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "common/clock.h"
#include "common/origin_defaults.h"
#include "common/units.h"
#include "control/control.h"
#include "daemon/daemon.h"

namespace granary::cli {
namespace {

struct LoadFlags {
  std::string target;
  std::string list;
  int threads = kDefaultOriginConcurrency;
  bool check = false;
  bool quiet = false;
  bool background = false;
  std::string run_dir = "/run/granary";
  std::string worker;  // SOURCE of a worker to load through instead of a mount
};

volatile sig_atomic_t g_interrupted = 0;

std::string ProgressLine(const LoadProgress& p) {
  char buf[256];
  std::snprintf(
      buf, sizeof(buf), "%llu/%llu files, %s/%s, %s/s, %.0f files/s, ETA %s",
      static_cast<unsigned long long>(p.files_done), static_cast<unsigned long long>(p.files_total),
      FormatSize(p.bytes_done).c_str(), FormatSize(p.bytes_total).c_str(),
      FormatSize(static_cast<uint64_t>(p.bytes_per_s)).c_str(), p.files_per_s,
      p.eta_s < 0
          ? "?"
          : FormatDuration(std::chrono::nanoseconds(static_cast<int64_t>(p.eta_s * 1e9))).c_str());
  return buf;
}

int PrintResult(const LoadResult& r, bool check) {
  std::printf("%s: %llu/%llu files cached (%s of %s)\n", check ? "check" : "load",
              static_cast<unsigned long long>(r.files_cached),
              static_cast<unsigned long long>(r.files_requested),
              FormatSize(r.bytes_cached).c_str(), FormatSize(r.bytes_requested).c_str());
  if (r.files_not_fitted > 0) {
    std::printf("did not fit in the cache: %llu files, %s\n",
                static_cast<unsigned long long>(r.files_not_fitted),
                FormatSize(r.bytes_not_fitted).c_str());
  }
  if (r.files_failed > 0) {
    std::printf("failed: %llu files\n", static_cast<unsigned long long>(r.files_failed));
    for (const auto& f : r.failures) std::printf("  %s: %s\n", f.path.c_str(), f.reason.c_str());
  }
  if (r.missing > 0) {
    std::printf("not in the dataset: %llu listed paths\n",
                static_cast<unsigned long long>(r.missing));
    for (const auto& m : r.missing_paths) std::printf("  %s\n", m.c_str());
  }
  if (r.files_not_loaded > 0 && !check) {
    std::printf("not loaded%s: %llu files\n", r.cancelled ? " (cancelled)" : "",
                static_cast<unsigned long long>(r.files_not_loaded));
  }
  return r.complete() ? kExitOk : kExitFailure;
}

int RunLoad(const LoadFlags& flags) {
  Result<MountLocation> loc = NotFound("no target");
  std::string socket;
  if (!flags.worker.empty()) {
    // A worker: TARGET, if given, is a path inside the dataset.
    auto path = WorkerSocketPath(flags.run_dir, flags.worker);
    if (!path.ok()) return ReportError(flags.worker, path.status());
    socket = *path;
    loc = MountLocation{.mountpoint = flags.worker, .subdir = flags.target};
  } else {
    if (flags.target.empty()) {
      return ReportError("load", InvalidArgument("name a mount point, or --worker SOURCE"));
    }
    loc = FindGranaryMount(flags.target);
    if (!loc.ok()) return ReportError(flags.target, loc.status());
    socket = DaemonSocketPath(flags.run_dir, loc->mountpoint);
  }
  // Progress lines also bring the wait back to the Ctrl-C check below.
  nlohmann::json req = {{"v", kControlProtocolVersion},
                        {"op", "load"},
                        {"path", loc->subdir},
                        {"threads", flags.threads},
                        {"check", flags.check},
                        {"background", flags.background},
                        {"progress", true}};
  if (!flags.list.empty()) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(flags.list, ec);
    if (ec || !std::filesystem::is_regular_file(abs, ec)) {
      return ReportError(flags.list, InvalidArgument("list file does not exist"));
    }
    req["list_file"] = abs.string();
  }
  auto client = ControlClient::Connect(socket);
  if (!client.ok()) return ReportError(loc->mountpoint, client.status());
  if (Status s = (*client)->Send(req); !s.ok()) return ReportError(loc->mountpoint, s);
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_interrupted = 1; };
  ::sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: Receive returns on Ctrl-C
  bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_line = Clock::Real()->Now();
  for (;;) {
    auto reply = (*client)->Receive();
    if (g_interrupted) {
      std::fprintf(stderr, "\ngranary: load cancelled (run it again to resume)\n");
      return 130;
    }
    if (!reply.ok()) return ReportError(loc->mountpoint, reply.status());
    if (Status s = StatusFromReply(*reply); !s.ok()) return ReportError(loc->mountpoint, s);
    if (reply->value("started", false)) {
      std::printf("background load started: %s\n",
                  ProgressLine(LoadProgressFromJson((*reply)["progress"])).c_str());
      return kExitOk;
    }
    if (reply->value("done", false)) {
      if (tty && !flags.quiet) std::fprintf(stderr, "\n");
      // "result": a daemon started before the one socket protocol.
      const char* key = reply->contains("load") ? "load" : "result";
      return PrintResult(LoadResultFromJson((*reply)[key]), flags.check);
    }
    if (flags.quiet || !reply->contains("progress")) continue;
    std::string line = ProgressLine(LoadProgressFromJson((*reply)["progress"]));
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
    } else if (Clock::Real()->Now() - last_line >= std::chrono::seconds(5)) {
      std::fprintf(stderr, "%s\n", line.c_str());
      last_line = Clock::Real()->Now();
    }
  }
}

}  // namespace

void RegisterLoadCommand(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<LoadFlags>();
  CLI::App* cmd = app.add_subcommand(
      "load", "Warm the cache of a mounted dataset (all of it, a sub-directory or a list)");
  cmd->add_option("TARGET", flags->target,
                  "A granary mount point or a directory inside one (with --worker: a path "
                  "inside the dataset, default all of it)");
  cmd->add_option("--worker", flags->worker, "Load through the worker of this dataset (SOURCE)");
  cmd->add_option("--list", flags->list,
                  "File of relative paths, one per line (\"path label\" lines accepted)");
  cmd->add_option("--threads", flags->threads, "Concurrent fetches")->check(CLI::Range(1, 4096));
  cmd->add_flag("--check", flags->check, "Only report what is cached; fetch nothing");
  cmd->add_flag("--quiet", flags->quiet, "No progress output");
  cmd->add_flag("--background", flags->background, "Start the load in the daemon and return");
  cmd->add_option("--run-dir", flags->run_dir, "Run directory of the daemons' sockets");
  cmd->callback([&ctx, flags] { ctx.action = [flags] { return RunLoad(*flags); }; });
}

}  // namespace granary::cli
