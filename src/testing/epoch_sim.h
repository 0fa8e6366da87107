// Epoch simulation: a training loader reading every object of a dataset once
// per epoch in a fresh random order, through a real Store (read; on a miss,
// admit). Used by the policy test and bench/store_read to compare policies.
// Header-only; not part of the library.
//
// The cache "holds fraction f of the dataset" when its capacity (high ×
// quota) equals f × the dataset's allocated bytes. Eviction runs every
// `evict_every` admissions, standing in for the background thread.
//
// Thread safety: SimulateEpochs is self-contained (one thread).
#pragma once

#include <algorithm>
#include <bit>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "store/store.h"

namespace granary {

struct EpochSimOptions {
  std::string dir;                  // tier directory (created; must be empty)
  std::string policy = "training";  // lru | training
  int objects = 10'000;             // dataset size in objects
  uint64_t object_size = 4096;      // bytes per object
  double cache_fraction = 0.35;     // share of the dataset the cache holds
  int epochs = 3;
  int evict_every = 64;  // admissions between eviction passes
  uint64_t seed = 1;
};

// Hit rate (hits / reads) of each epoch.
inline Result<std::vector<double>> SimulateEpochs(const EpochSimOptions& o) {
  const double high = 0.95;
  uint64_t alloc = (o.object_size + 4095) / 4096 * 4096;
  auto capacity = static_cast<uint64_t>(o.cache_fraction * o.objects * alloc);
  StoreOptions opt{.tiers = {TierLevel{.medium = Medium::kSsd,
                                       .path = o.dir,
                                       .quota = static_cast<uint64_t>(capacity / high),
                                       .high = high,
                                       .low = 0.85}},
                   .policy = o.policy,
                   .block_size = std::max<uint64_t>(4096, std::bit_ceil(o.object_size)),
                   .background = false,
                   .checkpoint_every_records = ~0ull};
  ASSIGN_OR_RETURN(auto store, Store::Open(opt));
  std::string data(o.object_size, 'x');
  std::string buf(o.object_size, '\0');
  std::vector<int> order(o.objects);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed);
  std::vector<double> rates;
  int admitted = 0;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    uint64_t hits = 0;
    for (int i : order) {
      ObjectKey key{.dataset = "sim", .key = std::to_string(i), .etag = "1", .size = o.object_size};
      if (store->Read(key, 0, std::span(buf)).ok()) {
        ++hits;
        continue;
      }
      ASSIGN_OR_RETURN(bool ok, store->AdmitObject(key, data));
      if (ok && ++admitted % o.evict_every == 0) store->RunEvictionOnce();
    }
    rates.push_back(static_cast<double>(hits) / o.objects);
  }
  return rates;
}

}  // namespace granary
