// runtime.json as Fluid writes it: parsed, mapped to Granary's settings, and
// refused with one line naming the field when it is wrong.
#include "fluid/runtime_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "fluid/fluid_node.h"

namespace granary::fluid {
namespace {

namespace fs = std::filesystem;

class RuntimeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("granary-fluid-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "minio-secret");
    Write("minio-secret/access-key", "AKIDEXAMPLE\n");
    Write("minio-secret/secret-key", "s3cr3t-value");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& rel, const std::string& text) { std::ofstream(dir_ / rel) << text; }
  std::string Secret(const std::string& key) { return (dir_ / "minio-secret" / key).string(); }

  // The example of Fluid's integration guide (../shared/fluid/CONTRACT.md),
  // with the secret files of this test.
  std::string Example() {
    return R"({
      "mounts": [{"mountPoint": "s3://test",
                  "options": {"endpoint_url": "http://minio:9000", "path_style": "true",
                              "region_name": "us-east-1"},
                  "encryptOptions": {"access-key": ")" +
           Secret("access-key") + R"(",
                                     "secret-key": ")" +
           Secret("secret-key") + R"("},
                  "name": "minio", "path": "/minio"}],
      "accessModes": ["ReadWriteMany"],
      "targetPath": "/runtime-mnt/cache/default/curvine-demo/cache-fuse",
      "master": {"enabled": true, "name": "curvine-demo-master", "options": {"key1": "master-value1"},
                 "replicas": 1, "service": {"name": "svc-curvine-demo-master"}},
      "worker": {"enabled": true, "name": "curvine-demo-worker", "options": {"key1": "worker-value1"},
                 "replicas": 1, "service": {"name": "svc-curvine-demo-worker"},
                 "tieredStoreLevels": [{"mountPaths": ["/etc/fluid/mount/tiered-store/level-0-index-0-emptydir"],
                                        "mediumType": "HDD", "quotas": ["1Gi"],
                                        "high": "0.8", "low": "0.5"}]},
      "client": {"enabled": true, "name": "curvine-demo-client", "options": {"key1": "value1"},
                 "service": {"name": ""}}
    })";
  }

  fs::path dir_;
};

TEST_F(RuntimeConfigTest, ParsesFluidsExample) {
  auto rt = ParseRuntimeConfig(Example());
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  ASSERT_EQ(rt->mounts.size(), 1u);
  const FluidMount& m = rt->mounts[0];
  EXPECT_EQ(m.path, "minio");
  EXPECT_EQ(m.uri.ToString(), "s3://test");
  EXPECT_EQ(m.ufs.options.at("endpoint"), "http://minio:9000");
  EXPECT_EQ(m.ufs.options.at("region"), "us-east-1");
  EXPECT_EQ(m.ufs.options.at("addressing"), "path");
  EXPECT_EQ(m.ufs.secrets.at("accessKeyId"), "AKIDEXAMPLE");  // trailing newline dropped
  EXPECT_EQ(m.ufs.secrets.at("secretAccessKey"), "s3cr3t-value");
  EXPECT_EQ(rt->access_modes, (std::vector<std::string>{"ReadWriteMany"}));
  EXPECT_EQ(rt->target_path, "/runtime-mnt/cache/default/curvine-demo/cache-fuse");
  EXPECT_EQ(rt->worker.name, "curvine-demo-worker");
  EXPECT_EQ(rt->worker.service_name, "svc-curvine-demo-worker");
  ASSERT_EQ(rt->worker.tiers.size(), 1u);
  EXPECT_EQ(rt->worker.tiers[0].medium, Medium::kHdd);
  EXPECT_EQ(rt->worker.tiers[0].quota, 1ull << 30);
  EXPECT_DOUBLE_EQ(rt->worker.tiers[0].high, 0.8);
  EXPECT_DOUBLE_EQ(rt->worker.tiers[0].low, 0.5);
  EXPECT_EQ(MountPaths(*rt), (std::vector<std::string>{"/minio"}));
}

TEST_F(RuntimeConfigTest, SeveralMountsTiersOfEveryKindAndNoClient) {
  fs::create_directories(dir_ / "pvc/nfs-imagenet/val");
  const std::string text = R"({
    "mounts": [
      {"mountPoint": "oss://imagenet/train", "name": "train",
       "options": {"fs.oss.endpoint": "oss-cn-hangzhou.aliyuncs.com"},
       "encryptOptions": {"fs.oss.accessKeyId": ")" +
                           Secret("access-key") + R"(",
                          "fs.oss.accessKeySecret": ")" +
                           Secret("secret-key") + R"("}},
      {"mountPoint": "pvc://nfs-imagenet/val", "name": "val", "path": "/data/val/"},
      {"mountPoint": "local:///mnt/extra", "name": "extra"}],
    "worker": {"name": "imagenet-worker", "replicas": 4, "options": {"pvcRoot": ")" +
                           (dir_ / "pvc").string() + R"("},
               "service": {"name": "svc-imagenet-worker"},
               "tieredStoreLevels": [
                 {"mediumType": "MEM", "quotas": ["2Gi"]},
                 {"mountPaths": ["/etc/fluid/mount/tiered-store/level-1-index-0-hostpath",
                                 "/etc/fluid/mount/tiered-store/level-1-index-1-hostpath"],
                  "mediumType": "SSD", "quotas": ["100Gi", "50Gi"], "high": "0.99", "low": "0.8"},
                 {"mountPaths": "/a,/b", "mediumType": "HDD", "quota": "1Ti"}]}
  })";
  auto rt = ParseRuntimeConfig(text);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  ASSERT_EQ(rt->mounts.size(), 3u);
  EXPECT_EQ(rt->mounts[0].path, "train");
  EXPECT_EQ(rt->mounts[0].uri.ToString(), "oss://imagenet/train");
  EXPECT_EQ(rt->mounts[0].ufs.options.at("endpoint"), "https://oss-cn-hangzhou.aliyuncs.com");
  EXPECT_EQ(rt->mounts[0].ufs.secrets.size(), 2u);
  EXPECT_EQ(rt->mounts[1].path, "data/val");
  EXPECT_EQ(rt->mounts[1].uri.scheme, Scheme::kFile);
  EXPECT_EQ("/" + rt->mounts[1].uri.key, (dir_ / "pvc/nfs-imagenet/val").string());
  EXPECT_EQ("/" + rt->mounts[2].uri.key, "/mnt/extra");
  EXPECT_FALSE(rt->client.present);  // absent: Fluid writes no disabled component
  auto disabled = ParseRuntimeConfig(R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
      "client": {"enabled": false, "name": "c"}})");
  ASSERT_TRUE(disabled.ok()) << disabled.status().ToString();
  EXPECT_TRUE(disabled->client.present);
  EXPECT_FALSE(disabled->client.enabled);
  EXPECT_EQ(rt->access_modes, (std::vector<std::string>{"ReadOnlyMany"}));
  ASSERT_EQ(rt->worker.tiers.size(), 5u);
  EXPECT_EQ(rt->worker.tiers[0].medium, Medium::kMem);
  EXPECT_EQ(rt->worker.tiers[0].path, "/dev/shm");
  EXPECT_EQ(rt->worker.tiers[2].quota, 50ull << 30);
  EXPECT_DOUBLE_EQ(rt->worker.tiers[2].high, 0.99);
  EXPECT_EQ(rt->worker.tiers[3].quota, (1ull << 40) / 2);  // one quota over two paths
  EXPECT_EQ(rt->worker.tiers[4].path, "/b");
}

TEST_F(RuntimeConfigTest, BadInputNamesTheFieldAndTheValue) {
  struct Case {
    std::string json;
    std::string expect;  // substring of the one-line error
  };
  const std::vector<Case> cases = {
      {"{", "not valid JSON"},
      {R"({"mounts": []})", "mounts: at least one mount"},
      {R"({"mounts": [{"mountPoint": "ftp://x/y", "name": "a"}]})",
       "mounts[0].mountPoint 'ftp://x/y': unknown scheme ftp"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a", "encryptOptions": {"access-key": "/no/such/file"}}]})",
       "mounts[0].encryptOptions.access-key: cannot read secret file /no/such/file"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a", "encryptOptions": {"password": "/x"}}]})",
       "unknown secret name 'password'"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a", "options": {"path_style": "maybe"}}]})",
       "mounts[0].options.path_style 'maybe'"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}, {"mountPoint": "s3://ckt", "path": "/a"}]})",
       "mounts[1].path '/a': used by another mount"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "path": "/"}, {"mountPoint": "s3://ckt", "name": "c"}]})",
       "lies inside"},
      {R"({"mounts": [{"mountPoint": "pvc:///x", "name": "a"}]})", "missing the claim name"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
           "worker": {"tieredStoreLevels": [{"mountPaths": ["/c"], "quotas": ["1Qi"]}]}})",
       "worker.tieredStoreLevels[0].quotas[0]: size '1Qi'"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
           "worker": {"tieredStoreLevels": [{"mountPaths": ["/c"], "quotas": ["1G"], "high": "0.5", "low": "0.9"}]}})",
       "worker.tieredStoreLevels[0]: low"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
           "worker": {"tieredStoreLevels": [{"mountPaths": ["/c"], "mediumType": "TAPE", "quotas": ["1G"]}]}})",
       "mediumType 'TAPE'"},
      {R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}], "worker": {"replicas": -1}})",
       "worker.replicas -1"},
  };
  for (const Case& c : cases) {
    auto rt = ParseRuntimeConfig(c.json);
    ASSERT_FALSE(rt.ok()) << c.json;
    EXPECT_EQ(rt.status().code() == Code::kNotFound ? Code::kNotFound : Code::kInvalidArgument,
              rt.status().code());
    EXPECT_NE(rt.status().message().find(c.expect), std::string::npos)
        << "got: " << rt.status().message() << "\nwant: " << c.expect;
    EXPECT_EQ(rt.status().message().find('\n'), std::string::npos);
  }
  // A secret's value never shows up in an error.
  Write("bad.json", R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a",
    "encryptOptions": {"secret-key": ")" +
                        Secret("secret-key") + R"("}, "options": {"bogus": 1}}],
    "worker": {"replicas": "x"}})");
  auto bad = LoadRuntimeConfig((dir_ / "bad.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().find("s3cr3t"), std::string::npos);
  EXPECT_EQ(LoadRuntimeConfig((dir_ / "missing.json").string()).status().code(), Code::kNotFound);
}

TEST_F(RuntimeConfigTest, PeersComeFromTheWorkerStatefulSet) {
  auto rt = ParseRuntimeConfig(R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
      "worker": {"name": "imagenet-worker", "replicas": 3, "service": {"name": "svc-imagenet-worker"},
                 "options": {"insecure": "true"}},
      "client": {"name": "imagenet-client", "options": {"peerPort": "7171"}}})");
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  auto addrs = WorkerAddresses(rt->worker);
  ASSERT_TRUE(addrs.ok());
  EXPECT_EQ(*addrs, (std::vector<std::string>{"imagenet-worker-0.svc-imagenet-worker:7070",
                                              "imagenet-worker-1.svc-imagenet-worker:7070",
                                              "imagenet-worker-2.svc-imagenet-worker:7070"}));
  EXPECT_EQ(*WorkerOrdinal(rt->worker, "imagenet-worker-2", "node"), 2);
  EXPECT_EQ(*WorkerOrdinal(rt->worker, "", "imagenet-worker-1"), 1);
  EXPECT_EQ(WorkerOrdinal(rt->worker, "other-3", "node").status().code(), Code::kNotFound);

  auto worker =
      BuildClusterOptions(*rt, Role::kWorker, PodIdentity{.pod_name = "imagenet-worker-1"});
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_EQ(worker->listen, "0.0.0.0:7070");
  EXPECT_EQ(worker->advertise, "imagenet-worker-1.svc-imagenet-worker:7070");
  EXPECT_FALSE(worker->client_only);
  EXPECT_TRUE(worker->insecure);
  auto beyond =
      BuildClusterOptions(*rt, Role::kWorker, PodIdentity{.pod_name = "imagenet-worker-3"});
  EXPECT_NE(beyond.status().message().find("beyond the 3 workers"), std::string::npos);

  // The client owns nothing, listens at its own peerPort, reaches the workers at theirs.
  auto client = BuildClusterOptions(*rt, Role::kClient, PodIdentity{.pod_ip = "10.0.0.7"});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(client->client_only);
  EXPECT_EQ(client->advertise, "10.0.0.7:7171");
  EXPECT_EQ(client->peers.find(":7171"), std::string::npos);
  EXPECT_NE(client->peers.find("imagenet-worker-2.svc-imagenet-worker:7070"), std::string::npos);

  // Without a secret or insecure, the cluster is refused with the option named.
  auto open = ParseRuntimeConfig(R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
      "worker": {"name": "w", "replicas": 1, "service": {"name": "s"}}})");
  ASSERT_TRUE(open.ok());
  auto refused = BuildClusterOptions(*open, Role::kWorker, PodIdentity{.pod_name = "w-0"});
  EXPECT_NE(refused.status().message().find("secret"), std::string::npos);
}

TEST_F(RuntimeConfigTest, ExplicitPeersAndEtcdOptions) {
  auto rt = ParseRuntimeConfig(R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
      "worker": {"name": "w", "replicas": 2, "options": {"insecure": "true",
                 "peers": "127.0.0.1:7101,127.0.0.1:7102", "cacheReplicas": "2"}}})");
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  auto w1 = BuildClusterOptions(*rt, Role::kWorker, PodIdentity{.pod_name = "w-1"});
  ASSERT_TRUE(w1.ok()) << w1.status().ToString();
  EXPECT_EQ(w1->listen, "0.0.0.0:7102");
  EXPECT_EQ(w1->advertise, "127.0.0.1:7102");
  EXPECT_EQ(w1->replicas, 2);

  auto etcd = ParseRuntimeConfig(R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
      "worker": {"name": "w", "service": {"name": "s"}, "options": {"insecure": "true",
                 "etcd": "http://etcd:2379"}}})");
  ASSERT_TRUE(etcd.ok());
  auto w0 = BuildClusterOptions(*etcd, Role::kWorker, PodIdentity{.pod_name = "w-0"});
  ASSERT_TRUE(w0.ok()) << w0.status().ToString();
  EXPECT_EQ(w0->etcd, "http://etcd:2379");
  EXPECT_TRUE(w0->peers.empty());
  EXPECT_EQ(w0->advertise, "w-0.s:7070");

  auto bad = ParseRuntimeConfig(R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
      "worker": {"name": "w", "service": {"name": "s"}, "options": {"peerPort": "99999"}}})");
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(BuildClusterOptions(*bad, Role::kWorker, PodIdentity{.pod_name = "w-0"})
                .status()
                .message()
                .find("option peerPort '99999'"),
            std::string::npos);
}

TEST_F(RuntimeConfigTest, DatasetSourceIsTheSameInEveryPod) {
  auto rt = ParseRuntimeConfig(R"({"mounts": [{"mountPoint": "s3://bkt", "name": "a"}],
      "worker": {"name": "imagenet-worker"}, "client": {"name": "imagenet-client"}})");
  ASSERT_TRUE(rt.ok());
  ::unsetenv("FLUID_DATASET_NAME");
  ::unsetenv("FLUID_DATASET_NAMESPACE");
  EXPECT_EQ(DatasetSource(*rt), "fluid://default/imagenet");
  ::setenv("FLUID_DATASET_NAME", "imnet", 1);
  ::setenv("FLUID_DATASET_NAMESPACE", "ml", 1);
  EXPECT_EQ(DatasetSource(*rt), "fluid://ml/imnet");
  ::unsetenv("FLUID_DATASET_NAME");
  ::unsetenv("FLUID_DATASET_NAMESPACE");
}

TEST(ReportSummaryTest, EveryValueIsAStringAndPercentagesNeverRoundUpToFull) {
  nlohmann::json totals = {{"cached_bytes", 999},
                           {"capacity", 3ull << 30},
                           {"ufs_files", 1281167},
                           {"ufs_total_bytes", 1000},
                           {"hit_ratio_reads", 0.8326}};
  auto s = ReportSummaryFromTotals(totals);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (auto it = s->begin(); it != s->end(); ++it) EXPECT_TRUE(it.value().is_string()) << it.key();
  EXPECT_EQ((*s)["cachedPercentage"], "99.9");
  EXPECT_EQ((*s)["cacheHitRatio"], "83.2");
  EXPECT_EQ((*s)["fileNum"], "1281167");
  EXPECT_EQ((*s)["cacheCapacity"], "3.00GiB");
  totals["cached_bytes"] = 1000;
  EXPECT_EQ((*ReportSummaryFromTotals(totals))["cachedPercentage"], "100.0");
  totals.erase("capacity");
  EXPECT_FALSE(ReportSummaryFromTotals(totals).ok());
}

}  // namespace
}  // namespace granary::fluid
