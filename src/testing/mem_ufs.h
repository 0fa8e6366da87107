// MemUfs: an in-memory UnderStorage for unit tests (never linked into the product).
//
// Objects live in a sorted map. Listing honours prefix, delimiter and paging
// (the continuation token is the last key returned). Failures can be injected
// per operation, and every call is counted (UnderStorage::stats()).
//
// Thread safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>

#include "common/mutex.h"
#include "ufs/ufs.h"

namespace granary::testing {

class MemUfs : public UnderStorage {
 public:
  explicit MemUfs(std::string root = "mem://test") : root_(std::move(root)) {}

  std::string Root() const override { return root_; }

  // Creates or replaces an object; the etag changes with the content.
  void Put(const std::string& key, std::string data, int64_t mtime_ns = 1'700'000'000'000'000'000);
  void Remove(const std::string& key);

  // When set, called before every Read; a non-OK return fails that read.
  void SetReadHook(std::function<Status(std::string_view key, uint64_t offset)> hook);

  // What BoundsRequestTime() answers (default false, like a POSIX origin);
  // set before the MemUfs is shared.
  void set_bounds_request_time(bool bounded) { bounded_ = bounded; }
  bool BoundsRequestTime() const override { return bounded_; }

 protected:
  Result<ListPage> ListImpl(const ListRequest& request) override;
  Result<ObjectInfo> StatImpl(std::string_view key) override;
  Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                          std::string_view if_match, std::optional<uint64_t>* xxh3) override;

 private:
  bool bounded_ = false;
  struct Object {
    std::string data;
    int64_t mtime_ns;
    std::string etag;
  };
  std::string root_;
  Mutex mu_;  // guards objects_, read_hook_, version_
  std::map<std::string, Object, std::less<>> objects_ GUARDED_BY(mu_);
  std::function<Status(std::string_view, uint64_t)> read_hook_ GUARDED_BY(mu_);
  uint64_t version_ GUARDED_BY(mu_) = 0;
};

}  // namespace granary::testing
