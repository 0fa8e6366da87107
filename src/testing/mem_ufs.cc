#include "testing/mem_ufs.h"

#include <cstring>
#include <functional>

namespace granary::testing {

void MemUfs::Put(const std::string& key, std::string data, int64_t mtime_ns) {
  MutexLock lock(mu_);
  std::string etag =
      std::to_string(std::hash<std::string>{}(data)) + "-" + std::to_string(++version_);
  objects_[key] = Object{std::move(data), mtime_ns, std::move(etag)};
}

void MemUfs::Remove(const std::string& key) {
  MutexLock lock(mu_);
  objects_.erase(key);
}

void MemUfs::SetReadHook(std::function<Status(std::string_view, uint64_t)> hook) {
  MutexLock lock(mu_);
  read_hook_ = std::move(hook);
}

Result<ListPage> MemUfs::ListImpl(const ListRequest& request) {
  MutexLock lock(mu_);
  ListPage page;
  auto it = request.continuation_token.empty() ? objects_.lower_bound(request.prefix)
                                               : objects_.upper_bound(request.continuation_token);
  int count = 0;
  std::string last;
  for (; it != objects_.end(); ++it) {
    const std::string& key = it->first;
    if (key.compare(0, request.prefix.size(), request.prefix) != 0) break;
    if (count == request.max_keys) {
      page.next_token = last;
      break;
    }
    if (!request.delimiter.empty()) {
      size_t pos = key.find(request.delimiter, request.prefix.size());
      if (pos != std::string::npos) {
        std::string cp = key.substr(0, pos + request.delimiter.size());
        page.common_prefixes.push_back(cp);
        ++count;
        // Skip every key under this common prefix.
        auto next = objects_.lower_bound(cp + "\xff");
        last = std::prev(next)->first;
        it = std::prev(next);
        continue;
      }
    }
    page.objects.push_back(
        ObjectInfo{key, it->second.data.size(), it->second.mtime_ns, it->second.etag});
    last = key;
    ++count;
  }
  return page;
}

Result<ObjectInfo> MemUfs::StatImpl(std::string_view key) {
  MutexLock lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFound(root_ + "/" + std::string(key) + ": no such object");
  return ObjectInfo{it->first, it->second.data.size(), it->second.mtime_ns, it->second.etag};
}

Result<size_t> MemUfs::ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                                std::string_view if_match, std::optional<uint64_t>* /*xxh3*/) {
  std::function<Status(std::string_view, uint64_t)> hook;
  {
    MutexLock lock(mu_);
    hook = read_hook_;
  }
  if (hook) RETURN_IF_ERROR(hook(key, offset));
  MutexLock lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFound(root_ + "/" + std::string(key) + ": no such object");
  if (!if_match.empty() && it->second.etag != if_match) {
    return EtagMismatch(root_ + "/" + std::string(key), if_match, it->second.etag);
  }
  const std::string& data = it->second.data;
  if (offset >= data.size()) return size_t{0};
  size_t n = std::min<size_t>(out.size(), data.size() - offset);
  std::memcpy(out.data(), data.data() + offset, n);
  return n;
}

}  // namespace granary::testing
