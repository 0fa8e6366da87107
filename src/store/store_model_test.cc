// Reference-model property test of the store: random sequences of admit
// (whole and by block), read, remove, evict, checkpoint and restart, checked
// after every step against a simple model of which blocks must be present and
// against the store's own accounting and the files on disk.
//
// The model: for each object, the set of blocks admitted (admission returned
// true) and not removed since. Without background work nothing else removes
// data, so between eviction passes every model block must be readable,
// byte-exact; after an eviction pass the model forgets what the store
// dropped (and checks it never gained anything).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "store/store.h"
#include "testing/store_test_util.h"

namespace granary {
namespace {

using testing_util::MakeData;
using testing_util::TempDir;

constexpr uint64_t kBlock = 64 * 1024;
constexpr int kObjects = 40;

struct Universe {
  std::vector<ObjectKey> keys;
  std::vector<std::string> data;
  explicit Universe(std::mt19937_64& rng) {
    for (int i = 0; i < kObjects; ++i) {
      uint64_t size = i % 4 == 0 ? rng() % (5 * kBlock) : rng() % (kBlock + 1);
      keys.push_back(ObjectKey{.dataset = i % 3 ? "a" : "b",
                               .key = "k" + std::to_string(i / 2),
                               .etag = "e" + std::to_string(i % 2),
                               .size = size});
      data.push_back(MakeData(size, 1000 + i));
    }
  }
  uint64_t Blocks(int i) const {
    return keys[i].size <= kBlock ? 1 : (keys[i].size + kBlock - 1) / kBlock;
  }
  std::string_view Block(int i, uint64_t b) const {
    return std::string_view(data[i]).substr(b * kBlock, kBlock);
  }
};

uint64_t Alloc(uint64_t n) { return (n + 4095) / 4096 * 4096; }

class ModelChecker {
 public:
  ModelChecker(const Universe& u, const StoreOptions& opt) : u_(u), opt_(opt) {}

  // Every model block is present and byte-exact; accounting matches.
  void Check(Store& store, const std::vector<std::set<uint64_t>>& model) {
    std::vector<uint64_t> used(opt_.tiers.size()), files(opt_.tiers.size());
    uint64_t complete = 0, complete_bytes = 0;
    for (int i = 0; i < kObjects; ++i) {
      auto info = store.Describe(u_.keys[i]);
      if (!info.ok()) {
        ASSERT_TRUE(model[i].empty()) << "object " << i << " lost";
        continue;
      }
      if (info->complete) {
        ++complete;
        complete_bytes += u_.keys[i].size;
      }
      uint64_t alloc = 0, present = 0;
      for (uint64_t b = 0; b < u_.Blocks(i); ++b) {
        bool has = store.ContainsRange(u_.keys[i], b * kBlock, 1) || u_.keys[i].size == 0;
        if (!has) {
          ASSERT_FALSE(model[i].count(b)) << "object " << i << " lost block " << b;
          continue;
        }
        ASSERT_TRUE(model[i].count(b) || u_.keys[i].size == 0)
            << "object " << i << " gained block " << b;
        ++present;
        alloc += Alloc(u_.Block(i, b).size());
      }
      EXPECT_EQ(info->blocks_present, present) << i;
      EXPECT_EQ(info->allocated_bytes, alloc) << i;
      used[info->tier] += alloc;
      files[info->tier]++;
      for (uint64_t b : model[i]) {
        std::string buf(u_.Block(i, b).size(), '\0');
        auto n = store.Read(u_.keys[i], b * kBlock, std::span(buf));
        ASSERT_TRUE(n.ok()) << "object " << i << " block " << b << ": " << n.status().ToString();
        ASSERT_EQ(buf, u_.Block(i, b)) << "object " << i << " block " << b;
      }
    }
    StoreStats st = store.stats();
    EXPECT_EQ(st.complete_objects, complete);
    EXPECT_EQ(st.complete_bytes, complete_bytes);
    EXPECT_EQ(st.owned_complete_objects, complete);  // no ownership oracle
    EXPECT_EQ(st.owned_complete_bytes, complete_bytes);
    for (size_t t = 0; t < opt_.tiers.size(); ++t) {
      EXPECT_EQ(st.tiers[t].used_bytes, used[t]) << "tier " << t;
      EXPECT_EQ(st.tiers[t].files, files[t]) << "tier " << t;
      EXPECT_LE(st.tiers[t].used_bytes, st.tiers[t].quota) << "tier " << t;
      EXPECT_EQ(FilesOnDisk(opt_.tiers[t].path), files[t]) << "tier " << t;
    }
  }

  // Cache files under a tier directory; fails on leftover tmp files.
  static uint64_t FilesOnDisk(const std::string& tier_path) {
    uint64_t n = 0;
    for (auto& sub : std::filesystem::directory_iterator(tier_path)) {
      if (!sub.is_directory()) continue;
      for (auto& f : std::filesystem::directory_iterator(sub.path())) {
        EXPECT_EQ(f.path().filename().string().find(".tmp."), std::string::npos) << f.path();
        ++n;
      }
    }
    return n;
  }

 private:
  const Universe& u_;
  const StoreOptions& opt_;
};

// Totals over a test's sequences, to show the interesting paths ran.
struct Coverage {
  uint64_t demotions = 0, evictions = 0, refusals = 0, no_space = 0, restarts = 0;
};

void RunSequence(uint64_t seed, const std::string& policy, Coverage& cov) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " policy " + policy);
  std::mt19937_64 rng(seed);
  Universe u(rng);
  TempDir dir;
  StoreOptions opt{.tiers = {TierLevel{.medium = Medium::kMem,
                                       .path = dir.path() + "/mem",
                                       .quota = 600 * 1024,
                                       .high = 0.8,
                                       .low = 0.5},
                             TierLevel{.medium = Medium::kSsd,
                                       .path = dir.path() + "/ssd",
                                       .quota = 1200 * 1024,
                                       .high = 0.9,
                                       .low = 0.6}},
                   .policy = policy,
                   .block_size = kBlock,
                   .background = false,
                   .index_shards = 4};
  auto opened = Store::Open(opt);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> store = std::move(*opened);
  std::vector<std::set<uint64_t>> model(kObjects);
  ModelChecker checker(u, opt);
  auto forget_dropped = [&] {
    for (int i = 0; i < kObjects; ++i) {
      std::erase_if(model[i],
                    [&](uint64_t b) { return !store->ContainsRange(u.keys[i], b * kBlock, 1); });
    }
  };
  for (int step = 0; step < 250; ++step) {
    int i = static_cast<int>(rng() % kObjects);
    int op = static_cast<int>(rng() % 100);
    if (op < 35) {
      auto r = store->AdmitObject(u.keys[i], u.data[i]);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      // A refused large object may still have some of its blocks.
      for (uint64_t b = 0; b < u.Blocks(i); ++b) {
        if (store->ContainsRange(u.keys[i], b * kBlock, 1)) model[i].insert(b);
      }
      if (*r) {
        ASSERT_TRUE(store->Contains(u.keys[i]));
      }
    } else if (op < 55) {
      uint64_t b = rng() % u.Blocks(i);
      auto r = store->AdmitBlock(u.keys[i], b, u.Block(i, b));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (*r) model[i].insert(b);
    } else if (op < 80) {
      uint64_t off = u.keys[i].size ? rng() % u.keys[i].size : 0;
      std::string buf(rng() % (2 * kBlock) + 1, '\0');
      auto n = store->Read(u.keys[i], off, std::span(buf));
      if (n.ok()) {
        ASSERT_EQ(buf.substr(0, *n), u.data[i].substr(off, *n));
      } else {
        ASSERT_EQ(n.status().code(), Code::kNotFound);
      }
    } else if (op < 86) {
      ASSERT_TRUE(store->Remove(u.keys[i]).ok());
      model[i].clear();
    } else if (op < 93) {
      store->RunEvictionOnce();
      forget_dropped();
    } else if (op < 96) {
      ASSERT_TRUE(store->Checkpoint().ok());
    } else {
      std::vector<std::string> before;
      for (int j = 0; j < kObjects; ++j) {
        auto info = store->Describe(u.keys[j]);
        before.push_back(info.ok() ? std::to_string(info->tier) + "/" +
                                         std::to_string(info->blocks_present)
                                   : "-");
      }
      StoreStats st = store->stats();
      cov.demotions += st.demotions;
      cov.evictions += st.evictions;
      cov.refusals += st.refusals;
      cov.no_space += st.no_space;
      cov.restarts++;
      store.reset();
      opened = Store::Open(opt);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      store = std::move(*opened);
      EXPECT_EQ(store->stats().orphans_removed, 0u);
      for (int j = 0; j < kObjects; ++j) {
        auto info = store->Describe(u.keys[j]);
        EXPECT_EQ(info.ok()
                      ? std::to_string(info->tier) + "/" + std::to_string(info->blocks_present)
                      : "-",
                  before[j])
            << "object " << j << " after restart";
      }
    }
    ASSERT_NO_FATAL_FAILURE(checker.Check(*store, model)) << "after step " << step << " op " << op;
  }
}

TEST(StoreModelTest, RandomSequencesLru) {
  Coverage cov;
  for (uint64_t seed = 1; seed <= 6; ++seed) ASSERT_NO_FATAL_FAILURE(RunSequence(seed, "lru", cov));
  EXPECT_GT(cov.demotions, 0u);
  EXPECT_GT(cov.evictions, 0u);
  EXPECT_GT(cov.no_space, 0u);
  EXPECT_GT(cov.restarts, 0u);
}

TEST(StoreModelTest, RandomSequencesTraining) {
  Coverage cov;
  for (uint64_t seed = 101; seed <= 104; ++seed) {
    ASSERT_NO_FATAL_FAILURE(RunSequence(seed, "training", cov));
  }
  EXPECT_GT(cov.refusals, 0u);
}

}  // namespace
}  // namespace granary
