// CachePolicy: which objects the store admits and which it evicts first.
//
// Two policies share this interface:
//  - lru: admit everything; evict the least recently used objects first.
//  - training: once admitting a new object would push usage past the store's
//    capacity (sum of high × quota over all tiers), refuse it instead of
//    evicting others. Under random-permutation epochs (every object read once
//    per epoch, fresh order) LRU evicts exactly what the next epoch needs; a
//    cache that stops admitting keeps its hit rate at the cached fraction.
//    Victims, when eviction does run, are still taken LRU-first.
//
// Thread safety: policies are stateless; every method is const and may be
// called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "granary/status.h"

namespace granary {

// What a policy sees when a new object asks to be admitted.
struct AdmissionRequest {
  std::string_view dataset;   // the object's dataset
  uint64_t object_bytes = 0;  // allocated bytes the whole object will need
  uint64_t used_bytes = 0;    // allocated bytes in all tiers now
  uint64_t capacity = 0;      // sum of high × quota over all tiers
};

// One object eviction may pick.
struct EvictionCandidate {
  uint64_t last_use = 0;  // logical use tick: larger = more recent
  uint64_t bytes = 0;     // allocated bytes it frees
  size_t handle = 0;      // opaque to the policy
};

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;
  virtual std::string_view name() const = 0;
  // True to admit a new object (blocks of an already admitted object are not asked).
  virtual bool ShouldAdmit(const AdmissionRequest& request) const = 0;
  // Orders `candidates` so that the first should be evicted first.
  virtual void RankVictims(std::vector<EvictionCandidate>& candidates) const = 0;
};

// "lru" or "training"; anything else is InvalidArgument naming the value.
Result<std::unique_ptr<CachePolicy>> MakeCachePolicy(std::string_view name);

}  // namespace granary
