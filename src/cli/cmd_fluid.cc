// `granary fluid worker|client|probe|report-summary|mount-ufs|dataload`: the
// entry points of Granary's Fluid CacheRuntime (docs/kubernetes.md). Each reads
// Fluid's runtime.json ($FLUID_RUNTIME_CONFIG_PATH or --config-file).
//
// stdout carries only what Fluid parses (report-summary's and mount-ufs's
// JSON); diagnostics and progress go to stderr. A bad runtime.json is one line
// naming the field and the value, exit 2; an operation that fails, exit 1.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "common/log.h"
#include "common/units.h"
#include "control/control.h"
#include "daemon/daemon.h"
#include "daemon/holder_channel.h"
#include "fluid/fluid_node.h"

namespace granary::cli {
namespace {

using fluid::Role;

struct FluidFlags {
  std::string config_file;
  std::string run_dir = "/run/granary";
  std::string mountpoint;   // client
  std::string advertise;    // client / dataload
  std::string component;    // probe: worker | client
  bool liveness = false;    // probe: the process answers, mounts not checked
  bool no_restart = false;  // client: no mount holder
  int threads = 64;         // dataload
  double watch_s = 1.0;
};

Result<fluid::FluidRuntime> LoadRuntime(const FluidFlags& f) {
  return fluid::LoadRuntimeConfig(fluid::RuntimeConfigPath(f.config_file));
}

fluid::FluidRunOptions RunOptions(const FluidFlags& f) {
  fluid::FluidRunOptions o{
      .config_path = fluid::RuntimeConfigPath(f.config_file),
      .run_dir = f.run_dir,
      .pod = fluid::PodIdentityFromEnvironment(),
      .watch_interval = std::chrono::milliseconds(static_cast<int64_t>(f.watch_s * 1000)),
      .mountpoint = f.mountpoint};
  o.pod.advertise = f.advertise;
  return o;
}

// `granary fluid client` without a holder above it: becomes the mount's
// holder (the container's first process) and runs this command again under
// it, so a daemon that crashes is replaced without losing the mount.
int HoldClientMount(const FluidFlags& f) {
  const std::string what = "fluid client";
  auto rt = LoadRuntime(f);
  if (!rt.ok()) return ReportError(what, rt.status());
  auto mp = fluid::ClientMountpoint(*rt, RunOptions(f));
  if (!mp.ok()) return ReportError(what, mp.status());
  std::error_code ec;
  std::filesystem::create_directories(*mp, ec);  // Fluid's target path may not exist yet
  Status s = RunThisCommandUnderMountHolder(*mp, fluid::DatasetSource(*rt), f.run_dir,
                                            /*allow_non_empty=*/false);
  if (!s.ok()) {
    ReportError(what, s);
    return kExitFailure;
  }
  return kExitOk;
}

int Serve(Role role, const FluidFlags& f, const GlobalFlags& globals) {
  // Foreground pods log at info to stderr (kubectl logs) unless told otherwise.
  if (globals.log_level == GlobalFlags{}.log_level) SetLogLevel("info").IgnoreError();
  const std::string what = "fluid " + std::string(fluid::RoleName(role));
  fluid::FluidRunOptions options = RunOptions(f);
  if (role == Role::kClient) {
    auto holder = HolderChannel::FromEnvironment();
    if (!holder.ok()) return ReportError(what, holder.status());
    if (*holder == nullptr && !f.no_restart) return HoldClientMount(f);
    options.holder = *holder;
  }
  auto server = fluid::FluidServer::Start(role, options);
  if (options.holder) {
    // Started by the holder: it reads how this process ends.
    if (!server.ok()) {
      GLOG_ERROR("{}: {}", what, server.status().ToString());
      options.holder->SendFailed(server.status()).IgnoreError();
      ExitHeldDaemon(server.status(), /*handed_over=*/false);
    }
    if (Status ready = options.holder->SendReady(); !ready.ok()) {
      GLOG_WARN("mount holder: {}", ready.ToString());
    }
    Status s = (*server)->Run();
    const bool handed_over = (*server)->daemon().handed_over();
    server->reset();
    ExitHeldDaemon(s, handed_over);
  }
  if (!server.ok()) return ReportError(what, server.status());
  Status s = (*server)->Run();
  if (!s.ok()) {
    ReportError("fluid " + std::string(fluid::RoleName(role)), s);
    return kExitFailure;
  }
  return kExitOk;
}

Result<Role> ProbeRole(const FluidFlags& f) {
  std::string c = f.component;
  if (c.empty()) {
    const char* env = std::getenv("FLUID_RUNTIME_COMPONENT_TYPE");
    c = env ? env : "worker";
  }
  if (c == "worker") return Role::kWorker;
  if (c == "client") return Role::kClient;
  return InvalidArgument("--component '" + c + "': expected worker or client");
}

// The state file of this node's `role` pod and its socket's answer to `op`.
struct PodAnswer {
  nlohmann::json state;
  nlohmann::json reply;
};
Result<PodAnswer> AskPod(const fluid::FluidRuntime& rt, const FluidFlags& f, Role role,
                         const char* op) {
  PodAnswer a;
  ASSIGN_OR_RETURN(a.state, fluid::ReadState(f.run_dir, role, fluid::DatasetSource(rt)));
  ASSIGN_OR_RETURN(a.reply, ControlCall(a.state.value("control_socket", ""),
                                        {{"v", kControlProtocolVersion}, {"op", op}}));
  return a;
}

// Exit 0 when the role's pod serves every mount (readiness), or answers at
// all (--liveness).
int Probe(const FluidFlags& f) {
  auto role = ProbeRole(f);
  if (!role.ok()) return ReportError("fluid probe", role.status());
  auto rt = LoadRuntime(f);
  if (!rt.ok()) return ReportError("fluid probe", rt.status());
  auto pod = AskPod(*rt, f, *role, "status");
  if (!pod.ok()) {
    ReportError("fluid probe", pod.status());
    return kExitFailure;
  }
  const nlohmann::json* state = &pod->state;
  if (f.liveness) return kExitOk;
  if (!state->value("ready", false)) {
    std::cerr << "granary: fluid probe: not ready: " << state->value("error", "") << std::endl;
    return kExitFailure;
  }
  // Every mount of the current runtime.json is served.
  const nlohmann::json mounted = state->value("mounted", nlohmann::json::array());
  for (const std::string& path : fluid::MountPaths(*rt)) {
    bool found = false;
    for (const auto& m : mounted) found = found || (m.is_string() && m.get<std::string>() == path);
    if (!found) {
      std::cerr << "granary: fluid probe: not ready: mount " << path << " is not served yet"
                << std::endl;
      return kExitFailure;
    }
  }
  return kExitOk;
}

int ReportSummary(const FluidFlags& f) {
  auto rt = LoadRuntime(f);
  if (!rt.ok()) return ReportError("fluid report-summary", rt.status());
  auto pod = AskPod(*rt, f, Role::kWorker, "cluster_status");
  if (!pod.ok()) {
    ReportError("fluid report-summary", pod.status());
    return kExitFailure;
  }
  auto summary =
      fluid::ReportSummaryFromTotals(pod->reply["cluster"].value("totals", nlohmann::json()));
  if (!summary.ok()) {
    ReportError("fluid report-summary", summary.status());
    return kExitFailure;
  }
  std::cout << summary->dump() << std::endl;
  return kExitOk;
}

// The mount paths the local worker serves; without a running worker, those
// of runtime.json (a workers-only runtime mounts by itself).
int MountUfs(const FluidFlags& f) {
  auto rt = LoadRuntime(f);
  if (!rt.ok()) return ReportError("fluid mount-ufs", rt.status());
  nlohmann::json mounted = nlohmann::json::array();
  auto state = fluid::ReadState(f.run_dir, Role::kWorker, fluid::DatasetSource(*rt));
  if (state.ok()) {
    mounted = state->value("mounted", nlohmann::json::array());
  } else {
    // Prove every mount is usable before saying it is mounted.
    auto opened = fluid::OpenMounts(*rt);
    if (!opened.ok()) {
      ReportError("fluid mount-ufs", opened.status());
      return kExitFailure;
    }
    for (const std::string& p : fluid::MountPaths(*rt)) mounted.push_back(p);
  }
  std::cout << nlohmann::json{{"mounted", mounted}}.dump() << std::endl;
  return kExitOk;
}

int DataLoad(const FluidFlags& f) {
  auto rt = LoadRuntime(f);
  if (!rt.ok()) return ReportError("fluid dataload", rt.status());
  const char* data_path = std::getenv("FLUID_DATALOAD_DATA_PATH");
  std::vector<std::string> paths = SplitList(data_path ? data_path : "", ':');
  if (paths.empty()) paths.push_back("/");
  std::vector<int> replicas;
  const char* rep = std::getenv("FLUID_DATALOAD_PATH_REPLICAS");
  for (const std::string& r : SplitList(rep ? rep : "", ':')) {
    char* end = nullptr;
    const long n = std::strtol(r.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 8) {
      return ReportError("fluid dataload",
                         InvalidArgument("FLUID_DATALOAD_PATH_REPLICAS '" + std::string(rep) +
                                         "': expected ':'-separated counts 1..8"));
    }
    replicas.push_back(static_cast<int>(n));
  }
  if (!replicas.empty() && replicas.size() != paths.size()) {
    return ReportError(
        "fluid dataload",
        InvalidArgument("FLUID_DATALOAD_PATH_REPLICAS has " + std::to_string(replicas.size()) +
                        " entries for " + std::to_string(paths.size()) + " paths"));
  }
  auto r = fluid::RunDataLoad(*rt, RunOptions(f), paths, replicas, f.threads,
                              [](const std::string& line) { std::cerr << line << std::endl; });
  if (!r.ok()) {
    ReportError("fluid dataload", r.status());
    return kExitFailure;
  }
  std::cerr << "dataload: " << r->files_cached << "/" << r->files_requested << " files cached";
  if (r->files_failed) std::cerr << ", " << r->files_failed << " failed";
  if (r->files_not_fitted) std::cerr << ", " << r->files_not_fitted << " did not fit";
  std::cerr << std::endl;
  for (const LoadFailure& fail : r->failures) {
    std::cerr << "dataload: " << fail.path << ": " << fail.reason << std::endl;
  }
  return r->complete() ? kExitOk : kExitFailure;
}

void AddCommon(CLI::App* cmd, FluidFlags* f) {
  cmd->add_option("--config-file", f->config_file,
                  "Fluid's runtime.json (default $FLUID_RUNTIME_CONFIG_PATH, else "
                  "/etc/fluid/config/runtime.json)")
      ->option_text("FILE");
  cmd->add_option("--run-dir", f->run_dir, "Directory of state files and daemon sockets")
      ->capture_default_str();
}

}  // namespace

void RegisterFluidCommand(CLI::App& app, CliContext& ctx) {
  auto f = std::make_shared<FluidFlags>();
  CLI::App* fluid = app.add_subcommand("fluid",
                                       "Entry points of the Fluid CacheRuntime "
                                       "(docs/kubernetes.md)");
  fluid->require_subcommand(1);

  CLI::App* worker =
      fluid->add_subcommand("worker", "Run as the Dataset's cache worker (foreground)");
  AddCommon(worker, f.get());
  worker->add_option("--watch-interval", f->watch_s, "Seconds between reads of runtime.json")
      ->capture_default_str();
  worker->callback(
      [&ctx, f] { ctx.action = [&ctx, f] { return Serve(Role::kWorker, *f, ctx.flags); }; });

  CLI::App* client = fluid->add_subcommand("client", "Run the FUSE client (foreground)");
  AddCommon(client, f.get());
  client->add_option("--mountpoint", f->mountpoint,
                     "Mount point (default $FLUID_RUNTIME_MOUNT_PATH, else targetPath)");
  client->add_option("--advertise", f->advertise,
                     "HOST:PORT of this member (default $POD_IP or the hostname at peerPort)");
  client->add_option("--watch-interval", f->watch_s, "Seconds between reads of runtime.json")
      ->capture_default_str();
  client->add_flag("--no-restart", f->no_restart,
                   "No mount holder: the mount dies with the daemon (no restart after a crash)");
  client->callback(
      [&ctx, f] { ctx.action = [&ctx, f] { return Serve(Role::kClient, *f, ctx.flags); }; });

  CLI::App* probe = fluid->add_subcommand("probe", "Exit 0 when this pod serves every mount");
  AddCommon(probe, f.get());
  probe->add_option("--component", f->component,
                    "worker or client (default $FLUID_RUNTIME_COMPONENT_TYPE, else worker)");
  probe->add_flag("--liveness", f->liveness, "Only check that the process answers");
  probe->callback([&ctx, f] { ctx.action = [f] { return Probe(*f); }; });

  CLI::App* summary =
      fluid->add_subcommand("report-summary", "Print Fluid's ReportSummary JSON (cluster-wide)");
  AddCommon(summary, f.get());
  summary->callback([&ctx, f] { ctx.action = [f] { return ReportSummary(*f); }; });

  CLI::App* mount_ufs = fluid->add_subcommand("mount-ufs", "Print {\"mounted\":[...]}");
  AddCommon(mount_ufs, f.get());
  mount_ufs->callback([&ctx, f] { ctx.action = [f] { return MountUfs(*f); }; });

  CLI::App* load = fluid->add_subcommand(
      "dataload", "Warm $FLUID_DATALOAD_DATA_PATH in the workers (Fluid's DataLoad)");
  AddCommon(load, f.get());
  load->add_option("--advertise", f->advertise, "HOST:PORT of this transient member");
  load->add_option("--threads", f->threads, "Concurrent fetches")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  load->callback([&ctx, f] { ctx.action = [f] { return DataLoad(*f); }; });
}

}  // namespace granary::cli
