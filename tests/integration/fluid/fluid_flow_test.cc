// A Fluid CacheRuntime simulated on one machine (there is no Kubernetes
// here), with the built `granary` binary and a real S3-compatible origin:
//
//   - three `granary fluid worker` pods with ordinals 0-2 from ONE runtime.json
//     (POD_NAME from the "downward API"), each in a network namespace of its own
//     and a mount namespace of its own in which the runtime's tier path is
//     bind-mounted onto that pod's directory, as a hostPath is on its node;
//   - a `granary fluid client` FUSE mount (a member that owns nothing, keeping
//     near copies in its own tier);
//   - `granary fluid dataload` of one sub-path, then `report-summary` equal to
//     the truth (bytes of exactly the loaded files; then everything after an
//     epoch through the client), each block fetched from the origin once;
//   - rewriting runtime.json adds a second mount, and removing it again takes it
//     away, without a restart;
//   - killing worker 1 leaves every read working;
//   - (a second case) Fluid scales the workers 3 -> 4 in the middle of an
//     epoch (runtime.json rewritten with replicas 4, a 4th worker pod): the
//     running pods apply it without a restart, the new worker takes its share
//     from the previous owners, and each block leaves the origin once for the
//     whole run, with no failed read;
//   - killing the client's daemon mid-epoch fails no read: the client's mount
//     holder starts another daemon on the same FUSE connection; neither does
//     an in-place upgrade (`granary mount --upgrade`).
// And the entry points' answers to bad input: one line naming the field.
//
// Needs root, /dev/fuse, moto_server, unshare (skipped otherwise). Processes
// are killed by PID (NetnsCluster), the FUSE mount undone in TearDown.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster_harness.h"
#include "control/status.h"
#include "daemon/daemon.h"
#include "daemon/holder_channel.h"
#include "fuse/fuse_server.h"
#include "subprocess.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Dataset;
using testing::EpochOptions;
using testing::NetnsCluster;
using testing::ProcessResult;

constexpr int kWorkers = 3;
constexpr int kClientHost = 3;       // node index of the client (and the data load)
constexpr int kExtraWorkerHost = 4;  // node index of a worker added by a scale-out
constexpr uint64_t kBlock = 256 << 10;
constexpr const char* kBucket = "fluid-imagenet";
constexpr const char* kValBucket = "fluid-val";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, int lines) {
  size_t at = text.size();
  for (int i = 0; i < lines && at > 0; ++i) at = text.rfind('\n', at - 1);
  return at == std::string::npos ? text : text.substr(at);
}

class FluidFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "needs unshare (util-linux)";
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
    ::setenv("AWS_CONFIG_FILE", "/dev/null", 1);
    ::unsetenv("AWS_ACCESS_KEY_ID");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
    auto net = NetnsCluster::Create({.nodes = kExtraWorkerHost + 1});
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    net_ = std::move(*net);
    if (!net_->isolated()) GTEST_LOG_(INFO) << "loopback fallback: " << net_->fallback_reason();
    auto origin = testing::Origin::Start(net_.get(), dir_.path());
    ASSERT_TRUE(origin.ok()) << origin.status().ToString();
    origin_ = std::move(*origin);
    // The second mount's data first: the origin's GET count strips the last
    // upload's prefix, which is the main dataset's.
    val_ = testing::MakeDataset(40, 0, kBlock, 11);
    ASSERT_TRUE(origin_->Upload(kValBucket, "val", val_).ok());
    data_ = testing::MakeDataset(300, 6, kBlock, 7);
    ASSERT_TRUE(origin_->Upload(kBucket, "ds", data_).ok());
    for (const auto& [key, bytes] : data_) keys_.push_back(key);

    dir_.Write("secrets/minio/access-key", "testing\n");
    dir_.Write("secrets/minio/secret-key", "testing\n");
    dir_.Write("secrets/peer/secret", "a shared peer secret of this test\n");
    fs::create_directories(tier());  // the runtime's tier path, empty on the host
    for (int i = 0; i <= kWorkers; ++i) {
      fs::create_directories(pod(i) + "/tier");
      fs::create_directories(pod(i) + "/run");
    }
    fs::create_directories(dir_.path() + "/client/mnt");
    WriteRuntime(/*with_val=*/false);
  }

  void TearDown() override {
    if (!net_) return;
    const std::string mnt = dir_.path() + "/client/mnt";
    if (client_pid_ > 0) net_->Kill(client_pid_, SIGTERM, std::chrono::seconds(20));
    for (int i = 0; i < 3 && IsMountpoint(mnt); ++i) UnmountFuse(mnt).IgnoreError();
    for (pid_t p : worker_pids_) {
      if (p > 0 && net_->Running(p)) net_->Kill(p, SIGTERM, std::chrono::seconds(20));
    }
    net_.reset();
  }

  std::string tier() const { return dir_.path() + "/tier"; }
  std::string pod(int i) const { return dir_.path() + "/worker" + std::to_string(i); }
  std::string config() const { return dir_.path() + "/runtime.json"; }
  std::string Secret(const std::string& rel) const { return dir_.path() + "/secrets/" + rel; }

  json Mount(const std::string& uri, const std::string& name) const {
    return {
        {"mountPoint", uri},
        {"name", name},
        {"path", "/" + name},
        {"options",
         {{"endpoint_url", origin_->endpoint()},
          {"path_style", "true"},
          {"region_name", "us-east-1"}}},
        {"encryptOptions",
         {{"access-key", Secret("minio/access-key")}, {"secret-key", Secret("minio/secret-key")}}}};
  }

  // Worker i's host: 0-2, then the one a scale-out adds.
  static int WorkerHost(int i) { return i < kWorkers ? i : kExtraWorkerHost; }

  // runtime.json shaped exactly as Fluid writes it (CONTRACT.md), plus the
  // engine options this test needs (explicit peers: namespaces have no DNS).
  void WriteRuntime(bool with_val, int workers = kWorkers) {
    std::string peers;
    for (int i = 0; i < workers; ++i) {
      const int h = WorkerHost(i);
      peers += (i ? "," : "") + net_->ip(h) + ":" + std::to_string(net_->PortFor(h, 7070));
    }
    json mounts = json::array({Mount(std::string("s3://") + kBucket + "/ds", "imagenet")});
    if (with_val) mounts.push_back(Mount(std::string("s3://") + kValBucket + "/val", "val"));
    json rt = {
        {"mounts", mounts},
        {"accessModes", {"ReadOnlyMany"}},
        {"targetPath", dir_.path() + "/client/mnt"},
        {"worker",
         {{"enabled", true},
          {"name", "imnet-worker"},
          {"replicas", workers},
          {"service", {{"name", "svc-imnet-worker"}}},
          {"options",
           {{"peers", peers}, {"secretFile", Secret("peer/secret")}, {"blockSize", "256KiB"}}},
          {"tieredStoreLevels",
           {{{"mountPaths", {tier()}},
             {"mediumType", "SSD"},
             {"quotas", {"1Gi"}},
             {"high", "0.99"},
             {"low", "0.8"}}}}}},
        {"client",
         {{"enabled", true},
          {"name", "imnet-client"},
          {"options", {{"peerPort", "7171"}}},
          {"service", {{"name", ""}}},
          {"tieredStoreLevels",
           {{{"mountPaths", {dir_.path() + "/client/tier"}},
             {"mediumType", "SSD"},
             {"quotas", {"1Gi"}}}}}}}};
    // As a ConfigMap update does: a new file renamed into place.
    std::ofstream(config() + ".tmp") << rt.dump(2);
    fs::rename(config() + ".tmp", config());
  }

  std::vector<std::string> Env(const std::string& pod_name) const {
    return {"env", "POD_NAME=" + pod_name, "FLUID_DATASET_NAME=imnet",
            "FLUID_DATASET_NAMESPACE=default", "FLUID_RUNTIME_CONFIG_PATH=" + config()};
  }

  // Worker i: its own network namespace, and a mount namespace in which the
  // tier path is this pod's directory.
  void StartWorker(int i) {
    std::vector<std::string> argv = Env("imnet-worker-" + std::to_string(i));
    const std::string cmd = "mount --bind '" + pod(i) + "/tier' '" + tier() + "' && exec " +
                            GRANARY_CLI_PATH + " fluid worker --run-dir '" + pod(i) +
                            "/run' --watch-interval 0.2";
    argv.insert(argv.end(), {"unshare", "--mount", "--propagation", "private", "sh", "-c", cmd});
    auto pid = net_->Spawn(WorkerHost(i), argv, pod(i) + "/worker.log");
    ASSERT_TRUE(pid.ok()) << pid.status().ToString();
    worker_pids_.push_back(*pid);
  }

  // The client pod: FUSE at targetPath, a member that owns nothing.
  void StartClient() {
    std::vector<std::string> argv = Env("imnet-client-abcde");
    argv.insert(argv.end(),
                {GRANARY_CLI_PATH, "fluid", "client", "--run-dir", dir_.path() + "/client/run",
                 "--advertise",
                 net_->ip(kClientHost) + ":" + std::to_string(net_->PortFor(kClientHost, 7171))});
    auto pid = net_->Spawn(kClientHost, argv, dir_.path() + "/client.log");
    ASSERT_TRUE(pid.ok());
    client_pid_ = *pid;
    ASSERT_TRUE(WaitReady(kClientHost, "client", dir_.path() + "/client/run"))
        << Tail(ReadFile(dir_.path() + "/client.log"), 10);
  }

  ProcessResult Granary(int host, std::vector<std::string> args, const std::string& pod_name = "x",
                        std::vector<std::string> extra_env = {}) {
    std::vector<std::string> argv = Env(pod_name);
    argv.insert(argv.end(), extra_env.begin(), extra_env.end());
    argv.push_back(GRANARY_CLI_PATH);
    argv.insert(argv.end(), args.begin(), args.end());
    return net_->Run(host, argv, std::chrono::seconds(120));
  }

  // Polls `granary fluid probe` until it exits 0 (true) or 60 s pass.
  bool WaitReady(int host, const std::string& component, const std::string& run_dir) {
    for (int i = 0; i < 600; ++i) {
      ProcessResult r =
          Granary(host, {"fluid", "probe", "--component", component, "--run-dir", run_dir});
      if (r.exit_code == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a probe
    }
    return false;
  }

  json Summary() {
    ProcessResult r = Granary(0, {"fluid", "report-summary", "--run-dir", pod(0) + "/run"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << "stdout: " << r.out;
    return j;
  }

  testing::TempDir dir_;
  std::unique_ptr<NetnsCluster> net_;
  std::unique_ptr<testing::Origin> origin_;
  Dataset data_, val_;
  std::vector<std::string> keys_;
  std::vector<pid_t> worker_pids_;
  pid_t client_pid_ = -1;
};

TEST_F(FluidFlowTest, WorkersClientDataLoadSummaryRewriteAndWorkerLoss) {
  for (int i = 0; i < kWorkers; ++i) StartWorker(i);
  for (int i = 0; i < kWorkers; ++i) {
    ASSERT_TRUE(WaitReady(i, "worker", pod(i) + "/run"))
        << "worker " << i << ": " << Tail(ReadFile(pod(i) + "/worker.log"), 10);
  }
  // Each worker keeps its cache in its own tier directory (the bind mount).
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_FALSE(fs::is_empty(pod(i) + "/tier")) << "worker " << i;
  }
  EXPECT_TRUE(fs::is_empty(tier())) << "a worker wrote to the host's tier path";

  // The client: FUSE at targetPath, fs type fuse.granary.
  StartClient();
  if (HasFatalFailure()) return;
  const std::string mnt = dir_.path() + "/client/mnt";
  ASSERT_NE(ReadFile("/proc/self/mountinfo").find(" " + mnt + " "), std::string::npos);
  EXPECT_NE(ReadFile("/proc/self/mountinfo").find("fuse.granary"), std::string::npos);

  uint64_t total = 0, train_bytes = 0, train_files = 0;
  for (const auto& [key, bytes] : data_) {
    total += bytes.size();
    if (key.starts_with("train/")) {
      train_bytes += bytes.size();
      ++train_files;
    }
  }
  json s0 = Summary();
  EXPECT_EQ(s0["fileNum"], std::to_string(data_.size()));
  EXPECT_EQ(s0["ufsTotal"], FluidSize(total));
  EXPECT_EQ(s0["cached"], "0B");
  EXPECT_EQ(s0["cacheCapacity"], FluidSize(3ull << 30));

  // DataLoad of one sub-path: exactly those files end up cached, cluster-wide.
  const auto gets0 = origin_->GetsPerKey();
  ProcessResult load =
      Granary(kClientHost,
              {"fluid", "dataload", "--run-dir", dir_.path() + "/dataload", "--advertise",
               net_->ip(kClientHost) + ":" + std::to_string(net_->PortFor(kClientHost, 7172))},
              "dataload-pod",
              {"FLUID_DATALOAD_DATA_PATH=/imagenet/train", "FLUID_DATALOAD_PATH_REPLICAS=1"});
  ASSERT_EQ(load.exit_code, 0) << load.err;
  EXPECT_TRUE(load.out.empty()) << "stdout: " << load.out;
  EXPECT_NE(load.err.find(std::to_string(train_files) + "/" + std::to_string(train_files) +
                          " files cached"),
            std::string::npos)
      << load.err;
  json s1 = Summary();
  EXPECT_EQ(s1["cached"], FluidSize(train_bytes));
  EXPECT_EQ(s1["fileNum"], std::to_string(data_.size()));

  // The rest through a worker (what docs/kubernetes.md says to run with
  // `kubectl exec` when a DataLoad pod cannot open a mount).
  ProcessResult wl = Granary(0, {"load", "--worker", "fluid://default/imnet", "imagenet/big",
                                 "--run-dir", pod(0) + "/run"});
  EXPECT_EQ(wl.exit_code, 0) << wl.out << wl.err;
  EXPECT_EQ(Summary()["cached"], FluidSize(total));

  // An epoch through the client: every byte right, everything cached at its
  // owner, and each block left the origin once for the whole cluster.
  auto epoch = testing::ReadEpoch(mnt + "/imagenet", data_, keys_,
                                  EpochOptions{.threads = 8, .block_size = kBlock});
  EXPECT_EQ(epoch.failures + epoch.mismatches, 0u)
      << (epoch.first_errors.empty() ? "" : epoch.first_errors[0]);
  json s2 = Summary();
  EXPECT_EQ(s2["cached"], FluidSize(total));
  EXPECT_EQ(s2["cachedPercentage"], "100.0");
  // The train files came from the workers' caches (loaded above): the
  // cluster's hit ratio counts the blocks the workers served from cache.
  EXPECT_NE(s2["cacheHitRatio"], "0.0");
  // The client has a tier: it kept near copies of what it read (its own
  // status), which the cluster's figures above do not count.
  ProcessResult cs =
      Granary(kClientHost, {"status", mnt, "--json", "--run-dir", dir_.path() + "/client/run"});
  ASSERT_EQ(cs.exit_code, 0) << cs.err;
  json client_status = json::parse(cs.out, nullptr, false);
  if (client_status.is_array()) client_status = client_status[0];
  EXPECT_GT(client_status.value("cached_bytes", uint64_t{0}), 0u) << cs.out;
  EXPECT_EQ(client_status.value("owned_block_bytes", uint64_t{1}), 0u) << cs.out;
  const auto gets = testing::Delta(origin_->GetsPerKey(), gets0);
  EXPECT_EQ(testing::Sum(gets), testing::BlocksOf(data_, kBlock));
  for (const auto& [key, n] : gets) {
    EXPECT_EQ(n, std::max<uint64_t>(1, (data_[key].size() + kBlock - 1) / kBlock)) << key;
  }

  // Fluid rewrites runtime.json with a second mount: it appears in every pod.
  WriteRuntime(/*with_val=*/true);
  const std::string val_file = mnt + "/val/" + val_.begin()->first;
  bool shown = false;
  for (int i = 0; i < 300 && !shown; ++i) {
    struct stat st {};
    shown = ::stat(val_file.c_str(), &st) == 0;
    if (!shown) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling the mount
  }
  ASSERT_TRUE(shown) << Tail(ReadFile(dir_.path() + "/client.log"), 10);
  EXPECT_TRUE(WaitReady(0, "worker", pod(0) + "/run"));
  ProcessResult mu = Granary(0, {"fluid", "mount-ufs", "--run-dir", pod(0) + "/run"});
  EXPECT_EQ(mu.exit_code, 0) << mu.err;
  EXPECT_EQ(json::parse(mu.out, nullptr, false), (json{{"mounted", {"/imagenet", "/val"}}}));
  std::vector<std::string> val_keys;
  for (const auto& [key, bytes] : val_) val_keys.push_back(key);
  auto val_epoch = testing::ReadEpoch(mnt + "/val", val_, val_keys,
                                      EpochOptions{.threads = 4, .block_size = kBlock});
  EXPECT_EQ(val_epoch.failures + val_epoch.mismatches, 0u)
      << (val_epoch.first_errors.empty() ? "" : val_epoch.first_errors[0]);
  EXPECT_EQ(Summary()["fileNum"], std::to_string(data_.size() + val_.size()));

  // Worker 1 dies: reads keep working (next owner, or the origin).
  net_->Kill(worker_pids_[1], SIGKILL);
  auto after = testing::ReadEpoch(mnt + "/imagenet", data_, keys_,
                                  EpochOptions{.threads = 8, .seed = 2, .block_size = kBlock});
  EXPECT_EQ(after.reads, keys_.size());
  EXPECT_EQ(after.failures + after.mismatches, 0u)
      << (after.first_errors.empty() ? "" : after.first_errors[0]);
  EXPECT_EQ(Summary()["fileNum"], std::to_string(data_.size() + val_.size()));

  // The client's daemon is killed (OOM, a crash) a quarter into an epoch: the
  // mount holder, the pod's first process, starts another daemon on the same
  // FUSE connection and no read fails.
  const std::string client_run = dir_.path() + "/client/run";
  auto held = AskMountHolder(client_run, mnt, {{"op", "status"}}, std::chrono::seconds(10));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const pid_t first_daemon = held->value("daemon_pid", 0);
  ASSERT_GT(first_daemon, 0);
  EXPECT_EQ(held->value("holder_pid", 0), client_pid_);
  std::atomic<bool> killed{false};
  auto crashed = testing::ReadEpoch(
      mnt + "/imagenet", data_, keys_,
      EpochOptions{.threads = 8, .seed = 3, .block_size = kBlock, .on_read = [&](uint64_t n) {
                     if (n >= keys_.size() / 4 && !killed.exchange(true)) {
                       ::kill(first_daemon, SIGKILL);
                     }
                   }});
  EXPECT_TRUE(killed.load());
  EXPECT_EQ(crashed.reads, keys_.size());
  EXPECT_EQ(crashed.failures + crashed.mismatches, 0u)
      << (crashed.first_errors.empty() ? "" : crashed.first_errors[0]);
  held = AskMountHolder(client_run, mnt, {{"op", "status"}}, std::chrono::seconds(10));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_NE(held->value("daemon_pid", 0), first_daemon);
  EXPECT_EQ(held->value("restarts", 0), 1) << held->dump();
  EXPECT_TRUE(WaitReady(kClientHost, "client", client_run))
      << Tail(ReadFile(dir_.path() + "/client.log"), 10);
  // An in-place upgrade of the client (to the same binary here), the command
  // docs/kubernetes.md gives, a quarter into an epoch: no failed read either.
  ProcessResult upgrade;
  std::atomic<bool> upgraded{false};
  auto during_upgrade = testing::ReadEpoch(
      mnt + "/imagenet", data_, keys_,
      EpochOptions{
          .threads = 8, .seed = 4, .block_size = kBlock, .on_read = [&](uint64_t n) {
            if (n >= keys_.size() / 4 && !upgraded.exchange(true)) {
              upgrade = Granary(kClientHost, {"mount", "--upgrade", mnt, "--run-dir", client_run});
            }
          }});
  EXPECT_EQ(upgrade.exit_code, 0) << upgrade.out << upgrade.err;
  EXPECT_EQ(during_upgrade.failures + during_upgrade.mismatches, 0u)
      << (during_upgrade.first_errors.empty() ? "" : during_upgrade.first_errors[0]);

  // Fluid removes the second mount again: it disappears, without a restart.
  WriteRuntime(/*with_val=*/false);
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    struct stat st {};
    gone = ::stat(val_file.c_str(), &st) != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling the mount
  }
  EXPECT_TRUE(gone) << Tail(ReadFile(dir_.path() + "/client.log"), 10);
  for (int i = 0; i < 100; ++i) {
    if (Summary()["fileNum"] == std::to_string(data_.size())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // worker 0 syncing
  }
  EXPECT_EQ(Summary()["fileNum"], std::to_string(data_.size()));
  ProcessResult mu2 = Granary(0, {"fluid", "mount-ufs", "--run-dir", pod(0) + "/run"});
  EXPECT_EQ(json::parse(mu2.out, nullptr, false), (json{{"mounted", {"/imagenet"}}}));
}

TEST_F(FluidFlowTest, WorkersScaledOutMidEpochByARewrittenRuntimeReadTheOriginOnce) {
  for (int i = 0; i < kWorkers; ++i) StartWorker(i);
  for (int i = 0; i < kWorkers; ++i) {
    ASSERT_TRUE(WaitReady(i, "worker", pod(i) + "/run"))
        << "worker " << i << ": " << Tail(ReadFile(pod(i) + "/worker.log"), 10);
  }
  StartClient();
  if (HasFatalFailure()) return;
  const std::string mnt = dir_.path() + "/client/mnt/imagenet";
  const auto gets0 = origin_->GetsPerKey();
  auto cold =
      testing::ReadEpoch(mnt, data_, keys_, EpochOptions{.threads = 8, .block_size = kBlock});
  EXPECT_EQ(cold.failures + cold.mismatches, 0u)
      << (cold.first_errors.empty() ? "" : cold.first_errors[0]);

  // Fluid scales the workers to 4 a third of the way into the next epoch: the
  // ConfigMap says so, the 4th pod starts, the running pods see the rewrite.
  std::atomic<bool> scaled{false};
  auto during = testing::ReadEpoch(
      mnt, data_, keys_,
      EpochOptions{.threads = 8, .seed = 2, .block_size = kBlock, .on_read = [&](uint64_t n) {
                     if (n < keys_.size() / 3 || scaled.exchange(true)) return;
                     WriteRuntime(/*with_val=*/false, kWorkers + 1);
                     StartWorker(kWorkers);
                   }});
  ASSERT_TRUE(scaled.load());
  EXPECT_EQ(during.reads, keys_.size());
  EXPECT_EQ(during.failures + during.mismatches, 0u)
      << (during.first_errors.empty() ? "" : during.first_errors[0]);
  ASSERT_TRUE(WaitReady(kExtraWorkerHost, "worker", pod(kWorkers) + "/run"))
      << Tail(ReadFile(pod(kWorkers) + "/worker.log"), 10);

  // Every pod applied it (the client sees 4 workers and itself; each worker
  // 4 members) and every handover ended.
  json cluster;
  for (int i = 0; i < 300; ++i) {
    ProcessResult st = Granary(kClientHost, {"status", dir_.path() + "/client/mnt", "--cluster",
                                             "--json", "--run-dir", dir_.path() + "/client/run"});
    cluster = json::parse(st.out, nullptr, false);
    bool settled = st.exit_code == 0 && cluster.is_object() &&
                   cluster["totals"].value("members", 0) == kWorkers + 2 &&
                   cluster["totals"].value("members_up", 0) == kWorkers + 2 &&
                   cluster["totals"].value("handovers_in_progress", 1) == 0;
    for (const json& m : settled ? cluster["members"] : json::array()) {
      if (m.value("self", false)) continue;
      settled = settled && m["status"]["cluster"].value("members", 0) == kWorkers + 1;
    }
    if (settled) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling the pods
  }
  ASSERT_EQ(cluster["totals"].value("members", 0), kWorkers + 2) << cluster.dump();
  ASSERT_EQ(cluster["totals"].value("handovers_in_progress", 1), 0) << cluster.dump();
  uint64_t taken = 0;
  for (const json& m : cluster["members"]) {
    if (m.value("address", "") ==
        net_->ip(kExtraWorkerHost) + ":" + std::to_string(net_->PortFor(kExtraWorkerHost, 7070))) {
      taken = m["status"]["cluster"]["handover"].value("blocks", uint64_t{0});
    }
  }
  EXPECT_GT(taken, 0u) << "the new worker took nothing over: " << cluster.dump();

  // The new worker reads everything (a warm-up through it: its own share from
  // its cache, the rest through the owners), and so does the client.
  ProcessResult wl = Granary(kExtraWorkerHost, {"load", "--worker", "fluid://default/imnet",
                                                "imagenet", "--run-dir", pod(kWorkers) + "/run"});
  EXPECT_EQ(wl.exit_code, 0) << wl.out << wl.err;
  auto after = testing::ReadEpoch(mnt, data_, keys_,
                                  EpochOptions{.threads = 8, .seed = 3, .block_size = kBlock});
  EXPECT_EQ(after.failures + after.mismatches, 0u)
      << (after.first_errors.empty() ? "" : after.first_errors[0]);
  const auto gets = testing::Delta(origin_->GetsPerKey(), gets0);
  GTEST_LOG_(INFO) << "3 -> 4 workers by a rewritten runtime.json: origin GETs "
                   << testing::Sum(gets) << " for " << testing::BlocksOf(data_, kBlock)
                   << " blocks; the new worker took " << taken << " blocks over";
  EXPECT_EQ(testing::Sum(gets), testing::BlocksOf(data_, kBlock));
}

TEST_F(FluidFlowTest, BadRuntimeConfigIsOneLineNamingTheFieldAndTheValue) {
  auto run = [&](const std::string& text) {
    dir_.Write("bad.json", text);
    return Granary(0,
                   {"fluid", "worker", "--config-file", dir_.path() + "/bad.json", "--run-dir",
                    dir_.path() + "/badrun"},
                   "imnet-worker-0");
  };
  const std::string ok_mount = "{\"mountPoint\": \"s3://" + std::string(kBucket) +
                               "/ds\", \"name\": \"a\", \"options\": {\"endpoint_url\": \"" +
                               origin_->endpoint() + "\"}}";
  const std::string worker = R"("worker": {"name": "imnet-worker", "replicas": 1,
      "service": {"name": "s"}, "options": {"insecure": "true"},
      "tieredStoreLevels": [{"mountPaths": [")" +
                             dir_.path() + R"(/badtier"], "quotas": ["1Gi"]}]})";
  struct Case {
    std::string text, want;
  };
  const std::vector<Case> cases = {
      {"{ not json", "not valid JSON"},
      {R"({"mounts": [{"mountPoint": "gs://x/y", "name": "a"}], )" + worker + "}",
       "mounts[0].mountPoint 'gs://x/y': unknown scheme gs"},
      {R"({"mounts": [{"mountPoint": "s3://fluid-imagenet/ds", "name": "a",
          "encryptOptions": {"access-key": "/nonexistent/ak"}}], )" +
           worker + "}",
       "mounts[0].encryptOptions.access-key: cannot read secret file /nonexistent/ak"},
      {"{\"mounts\": [" + ok_mount + R"(], "worker": {"name": "imnet-worker", "replicas": 1,
          "service": {"name": "s"}, "options": {"insecure": "true"},
          "tieredStoreLevels": [{"mountPaths": ["/x"], "quotas": ["lots"]}]}})",
       "worker.tieredStoreLevels[0].quotas[0]: size 'lots'"},
      {"{\"mounts\": [{\"mountPoint\": \"s3://no-such-bucket-here/x\", \"name\": \"a\", "
       "\"options\": {\"endpoint_url\": \"" +
           origin_->endpoint() + "\"}}], " + worker + "}",
       "mounts[0] (a) s3://no-such-bucket-here/x"},
  };
  for (const Case& c : cases) {
    ProcessResult r = run(c.text);
    EXPECT_NE(r.exit_code, 0) << c.text;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << "stderr: " << r.err << "\nwant: " << c.want;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  ProcessResult missing =
      Granary(0, {"fluid", "probe", "--config-file", dir_.path() + "/none.json"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("none.json"), std::string::npos) << missing.err;
  // Nothing runs: the probe says so, and report-summary prints nothing on stdout.
  ProcessResult probe = Granary(0, {"fluid", "probe", "--run-dir", dir_.path() + "/nothing"});
  EXPECT_NE(probe.exit_code, 0);
  ProcessResult summary =
      Granary(0, {"fluid", "report-summary", "--run-dir", dir_.path() + "/nothing"});
  EXPECT_NE(summary.exit_code, 0);
  EXPECT_TRUE(summary.out.empty());
}

}  // namespace
}  // namespace granary
