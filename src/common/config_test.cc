#include "common/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace granary {
namespace {

TEST(Config, FluidShapedYaml) {
  auto dir = std::filesystem::temp_directory_path() / ("granary-cfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "s3-secret");
  std::ofstream(dir / "s3-secret" / "access-key") << "AKIDEXAMPLE\n";
  std::ofstream(dir / "sk") << "wJalrXUtnFEMI\n";
  std::string yaml = R"(
dataset:
  name: imagenet
  mounts:
    - mountPoint: s3://imagenet/train
      name: train
      options:
        endpoint: http://127.0.0.1:9000
        region: us-east-1
      encryptOptions:
        - name: accessKeyId
          valueFrom:
            secretKeyRef: {name: s3-secret, key: access-key}
        - name: secretAccessKey
          valueFile: )" +
                     (dir / "sk").string() + R"(
runtime:
  replicas: 2
  secretsDir: )" + dir.string() +
                     R"(
  tieredstore:
    levels:
      - mediumtype: SSD
        path: /nvme/a,/nvme/b
        quota: 100Gi
        high: "0.9"
        low: "0.6"
      - mediumtype: MEM
        path: /dev/shm/granary
        quota: 2G
  cache:
    policy: training
    blockSize: 1MiB
    ufsConcurrency: 32
)";
  auto cfg = ParseConfig(yaml, "test.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->dataset_name, "imagenet");
  ASSERT_EQ(cfg->mounts.size(), 1u);
  EXPECT_EQ(cfg->mounts[0].uri, "s3://imagenet/train");
  EXPECT_EQ(cfg->mounts[0].options.at("endpoint"), "http://127.0.0.1:9000");
  EXPECT_EQ(cfg->mounts[0].secrets.at("accessKeyId"), "AKIDEXAMPLE");
  EXPECT_EQ(cfg->mounts[0].secrets.at("secretAccessKey"), "wJalrXUtnFEMI");
  EXPECT_EQ(cfg->replicas, 2);
  ASSERT_EQ(cfg->tiers.size(), 3u);
  EXPECT_EQ(cfg->tiers[0].medium, Medium::kMem);  // fastest first
  EXPECT_EQ(cfg->tiers[0].quota, 2ull << 30);
  EXPECT_EQ(cfg->tiers[1].path, "/nvme/a");
  EXPECT_EQ(cfg->tiers[1].quota, 50ull << 30);  // quota split over the level's paths
  EXPECT_DOUBLE_EQ(cfg->tiers[1].high, 0.9);
  EXPECT_DOUBLE_EQ(cfg->tiers[1].low, 0.6);
  EXPECT_EQ(cfg->policy, "training");
  EXPECT_EQ(cfg->block_size, 1u << 20);
  EXPECT_EQ(cfg->ufs_concurrency, 32);
  std::filesystem::remove_all(dir);
}

TEST(Config, EmptyIsDefaults) {
  auto cfg = ParseConfig("", "empty.yaml");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->policy, "lru");
  EXPECT_EQ(cfg->block_size, 4u << 20);
}

TEST(Config, ErrorsNameFieldAndValue) {
  struct Case {
    const char* yaml;
    const char* field;
    const char* value;
  } cases[] = {
      {"dataset: {mounts: [{mountPoint: 'gs://x/y'}]}", "dataset.mounts[0].mountPoint", "gs://x/y"},
      {"dataset: {mounts: [{name: x}]}", "dataset.mounts[0].mountPoint", ""},
      {"runtime: {tieredstore: {levels: [{mediumtype: NVM, path: /x, quota: 1G}]}}",
       "runtime.tieredstore.levels[0].mediumtype", "NVM"},
      {"runtime: {tieredstore: {levels: [{mediumtype: SSD, path: /x, quota: lots}]}}",
       "runtime.tieredstore.levels[0].quota", "lots"},
      {"runtime: {tieredstore: {levels: [{mediumtype: SSD, path: /x, quota: 1G, high: '1.5'}]}}",
       "runtime.tieredstore.levels[0].high", "1.5"},
      {"runtime: {tieredstore: {levels: [{mediumtype: SSD, path: rel, quota: 1G}]}}",
       "runtime.tieredstore.levels[0].path", "rel"},
      {"runtime: {tieredstore: {levels: [{mediumtype: SSD, path: /x, quota: 1G, high: '0.5', low: "
       "'0.8'}]}}",
       "levels[0].low", "0.8"},
      {"runtime: {cache: {policy: fifo}}", "runtime.cache.policy", "fifo"},
      {"runtime: {cache: {blockSize: 3000}}", "runtime.cache.blockSize", "3000"},
      {"runtime: {replicas: zero}", "runtime.replicas", "zero"},
      {"dataset: {mounts: [{mountPoint: 's3://bkt/x', encryptOptions: [{name: k, valueFile: "
       "/nonexistent/f}]}]}",
       "encryptOptions[0]", "/nonexistent/f"},
      {"dataset: [unclosed", "not valid YAML", ""},
  };
  for (const auto& c : cases) {
    auto r = ParseConfig(c.yaml, "bad.yaml");
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    const std::string msg = r.status().message();
    EXPECT_NE(msg.find("bad.yaml"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.value), std::string::npos) << msg;
  }
}

// Dataset.accessModes with a ReadWrite mode makes the mount
// writable (what `granary mount --config` then passes on as --writable).
TEST(Config, ReadWriteAccessModesMakeTheMountWritable) {
  auto ro = ParseConfig("dataset: {accessModes: [ReadOnlyMany]}", "ro.yaml");
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_FALSE(ro->writable());
  EXPECT_FALSE(ParseConfig("", "empty.yaml")->writable());
  for (const char* mode : {"ReadWriteMany", "ReadWriteOnce"}) {
    auto rw =
        ParseConfig(std::string("dataset: {accessModes: [ReadOnlyMany, ") + mode + "]}", "rw.yaml");
    ASSERT_TRUE(rw.ok()) << rw.status().ToString();
    EXPECT_TRUE(rw->writable()) << mode;
    EXPECT_EQ(rw->access_modes.size(), 2u);
  }
  auto bad = ParseConfig("dataset: {accessModes: [ReadWriteSometimes]}", "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dataset.accessModes[0]"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("ReadWriteSometimes"), std::string::npos);
  EXPECT_FALSE(
      ParseConfig("dataset: {accessModes: ReadWriteMany}", "bad.yaml").ok());  // not a list
}

TEST(Config, ClusterSection) {
  auto cfg = ParseConfig(R"(
runtime:
  cluster:
    listen: 10.0.0.1:7070
    peers: [10.0.0.1:7070, 10.0.0.2:7070]
    etcd: http://10.0.0.9:2379
    secretFile: /etc/granary/secret
    replicas: 2
    peerTimeout: 2s
    clientOnly: true
)");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->cluster.listen, "10.0.0.1:7070");
  EXPECT_EQ(cfg->cluster.peers, "10.0.0.1:7070,10.0.0.2:7070");
  EXPECT_EQ(cfg->cluster.etcd, "http://10.0.0.9:2379");
  EXPECT_EQ(cfg->cluster.secret_file, "/etc/granary/secret");
  EXPECT_EQ(cfg->cluster.replicas, 2);
  EXPECT_EQ(cfg->cluster.peer_timeout, "2s");
  EXPECT_TRUE(cfg->cluster.client_only);
  EXPECT_FALSE(cfg->cluster.insecure);

  auto bad = ParseConfig("runtime:\n  cluster:\n    insecure: maybe\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("runtime.cluster.insecure"), std::string::npos);
  bad = ParseConfig("runtime:\n  cluster:\n    replicas: 99\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("runtime.cluster.replicas"), std::string::npos);
  bad = ParseConfig("runtime:\n  cluster:\n    peerTimeout: soon\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("runtime.cluster.peerTimeout"), std::string::npos);
}

TEST(Config, MissingFileIsNotFound) {
  auto r = LoadConfigFile("/nonexistent/granary.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/granary.yaml"), std::string::npos);
}

}  // namespace
}  // namespace granary
