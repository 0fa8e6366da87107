// Test fixture shared by the control/load/status/metrics tests: a dataset in
// MemUfs, its snapshot, a store in a temp dir and a CacheEngine, in-process
// (no FUSE). Test-only.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "cache/engine.h"
#include "meta/snapshot.h"
#include "store/store.h"
#include "testing/mem_ufs.h"

namespace granary {

class DatasetFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("granary-ctl-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "cache");
    ufs_ = std::make_shared<testing::MemUfs>("mem://bkt");
  }
  void TearDown() override {
    engine_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Object `path` (relative to the dataset) of `size` bytes.
  void Put(const std::string& path, size_t size) {
    sizes_[path] = size;
    total_bytes_ += size;
    ufs_->Put("ds/" + path, std::string(size, static_cast<char>('a' + sizes_.size() % 26)));
  }

  void Open(uint64_t quota = 1ull << 30, std::string policy = "lru") {
    auto snap =
        Snapshot::Build(*ufs_, SnapshotOptions{.source_uri = "mem://bkt/ds", .prefix = "ds"},
                        (dir_ / "snapshot").string(), 1);
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    snapshot_ = std::move(*snap);
    auto store = Store::Open(StoreOptions{
        .tiers = {TierLevel{
            .medium = Medium::kSsd, .path = (dir_ / "cache").string(), .quota = quota}},
        .policy = policy,
        .block_size = 64 << 10,
        .background = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    engine_ = std::make_unique<CacheEngine>(
        ufs_, snapshot_, store_.get(), EngineOptions{.dataset = "ds", .origin_concurrency = 8});
  }

  std::filesystem::path dir_;
  std::shared_ptr<testing::MemUfs> ufs_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CacheEngine> engine_;
  std::map<std::string, size_t> sizes_;
  uint64_t total_bytes_ = 0;
};

}  // namespace granary
