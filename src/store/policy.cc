// The lru and training cache policies (see policy.h).
#include "store/policy.h"

#include <algorithm>
#include <string>

namespace granary {
namespace {

void RankLeastRecentFirst(std::vector<EvictionCandidate>& candidates) {
  std::sort(candidates.begin(), candidates.end(),
            [](const EvictionCandidate& a, const EvictionCandidate& b) {
              return a.last_use < b.last_use;
            });
}

class LruPolicy : public CachePolicy {
 public:
  std::string_view name() const override { return "lru"; }
  bool ShouldAdmit(const AdmissionRequest&) const override { return true; }
  void RankVictims(std::vector<EvictionCandidate>& candidates) const override {
    RankLeastRecentFirst(candidates);
  }
};

class TrainingPolicy : public CachePolicy {
 public:
  std::string_view name() const override { return "training"; }
  bool ShouldAdmit(const AdmissionRequest& r) const override {
    return r.used_bytes + r.object_bytes <= r.capacity;
  }
  void RankVictims(std::vector<EvictionCandidate>& candidates) const override {
    RankLeastRecentFirst(candidates);
  }
};

}  // namespace

Result<std::unique_ptr<CachePolicy>> MakeCachePolicy(std::string_view name) {
  if (name == "lru") return std::unique_ptr<CachePolicy>(new LruPolicy());
  if (name == "training") return std::unique_ptr<CachePolicy>(new TrainingPolicy());
  return InvalidArgument("store policy '" + std::string(name) + "': expected lru or training");
}

}  // namespace granary
