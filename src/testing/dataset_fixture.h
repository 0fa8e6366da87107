// Test fixture shared by the control/load/status/metrics tests: a dataset in
// MemUfs opened through Dataset (snapshot, store in a temp dir, engine),
// in-process (no FUSE). Test-only.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "cache/engine.h"
#include "dataset/dataset.h"
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
    engine_ = nullptr;
    store_ = nullptr;
    dataset_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Object `path` (relative to the dataset) of `size` bytes.
  void Put(const std::string& path, size_t size) {
    sizes_[path] = size;
    total_bytes_ += size;
    ufs_->Put("ds/" + path, std::string(size, static_cast<char>('a' + sizes_.size() % 26)));
  }

  void Open(uint64_t quota = 1ull << 30, std::string policy = "lru") {
    DatasetOptions o;
    o.source = "s3://bkt/ds";
    o.cache_dirs = {
        TierLevel{.medium = Medium::kSsd, .path = (dir_ / "cache").string(), .quota = quota}};
    o.policy = std::move(policy);
    o.block_size = 64 << 10;
    o.engine.origin_concurrency = 8;
    o.store_background = false;
    auto ds = Dataset::Open(std::move(o), ufs_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    dataset_ = std::move(*ds);
    snapshot_ = dataset_->snapshot();
    store_ = &dataset_->store();
    engine_ = &dataset_->engine();
  }

  std::filesystem::path dir_;
  std::shared_ptr<testing::MemUfs> ufs_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::unique_ptr<Dataset> dataset_;
  Store* store_ = nullptr;         // dataset_'s
  CacheEngine* engine_ = nullptr;  // dataset_'s
  std::map<std::string, size_t> sizes_;
  uint64_t total_bytes_ = 0;
};

}  // namespace granary
