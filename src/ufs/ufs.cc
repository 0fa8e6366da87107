#include "ufs/ufs.h"

#include <algorithm>
#include <mutex>

#include "common/thread_pool.h"

namespace granary {

Result<ListPage> UnderStorage::List(const ListRequest& request) {
  if (request.max_keys < 1 || request.max_keys > 1000) {
    return InvalidArgument("list " + Root() + ": max_keys " + std::to_string(request.max_keys) +
                           " out of range [1, 1000]");
  }
  list_requests_.fetch_add(1, std::memory_order_relaxed);
  auto r = ListImpl(request);
  if (!r.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  } else if (r->skipped_entries > 0) {
    bad_list_entries_.fetch_add(r->skipped_entries, std::memory_order_relaxed);
  }
  return r;
}

Result<ObjectInfo> UnderStorage::Stat(std::string_view key) {
  stat_requests_.fetch_add(1, std::memory_order_relaxed);
  auto r = StatImpl(key);
  if (!r.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

Result<size_t> UnderStorage::Read(std::string_view key, uint64_t offset, std::span<char> out,
                                  std::string_view if_match, std::optional<uint64_t>* xxh3) {
  read_requests_.fetch_add(1, std::memory_order_relaxed);
  std::optional<uint64_t> ignored;
  if (xxh3 == nullptr) xxh3 = &ignored;
  xxh3->reset();
  if (out.empty()) return size_t{0};
  auto r = ReadImpl(key, offset, out, if_match, xxh3);
  if (!r.ok()) xxh3->reset();
  if (!r.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  } else {
    read_bytes_.fetch_add(*r, std::memory_order_relaxed);
  }
  return r;
}

Status UnderStorage::CheckWrite(std::string_view key, int fd, const WriteOptions& options) const {
  if (key.empty() || key.starts_with("/") || key.ends_with("/")) {
    return InvalidArgument(Root() + ": cannot write object key '" + std::string(key) + "'");
  }
  if (fd < 0) return InvalidArgument(Root() + "/" + std::string(key) + ": write: no source file");
  if (options.part_size < (5ull << 20) || options.parallel_parts < 1) {
    return InvalidArgument(Root() + "/" + std::string(key) +
                           ": write: part_size must be >= 5 MiB and parallel_parts >= 1");
  }
  return Status::Ok();
}

Result<ObjectInfo> UnderStorage::Write(std::string_view key, int fd, uint64_t size,
                                       const WriteOptions& options) {
  write_requests_.fetch_add(1, std::memory_order_relaxed);
  if (Status bad = CheckWrite(key, fd, options); !bad.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return bad;
  }
  auto r = WriteImpl(key, fd, size, options);
  if (!r.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  } else {
    write_bytes_.fetch_add(size, std::memory_order_relaxed);
  }
  return r;
}

Result<std::unique_ptr<StreamingUpload>> UnderStorage::StartUpload(std::string_view key, int fd,
                                                                   const WriteOptions& options) {
  if (Status bad = CheckWrite(key, fd, options); !bad.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return bad;
  }
  auto r = StartUploadImpl(key, fd, options);
  if (!r.ok() && r.status().code() != Code::kUnimplemented) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  }
  return r;
}

Result<ObjectInfo> UnderStorage::CompleteUpload(StreamingUpload& upload, uint64_t size) {
  write_requests_.fetch_add(1, std::memory_order_relaxed);
  auto r = upload.Complete(size);
  if (!r.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  } else {
    write_bytes_.fetch_add(size, std::memory_order_relaxed);
  }
  return r;
}

Status UnderStorage::AbortUpload(std::string_view key, std::string_view upload_id) {
  if (key.empty() || upload_id.empty()) {
    return InvalidArgument(Root() + ": abort upload: empty key or upload id");
  }
  Status s = AbortUploadImpl(key, upload_id);
  if (!s.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Status UnderStorage::Delete(std::string_view key) {
  delete_requests_.fetch_add(1, std::memory_order_relaxed);
  if (key.empty()) return InvalidArgument(Root() + ": cannot delete an empty key");
  Status s = DeleteImpl(key);
  if (!s.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Status UnderStorage::EtagMismatch(std::string_view what, std::string_view expected,
                                  std::string_view got) {
  return Stale(std::string(what) + ": changed at the origin since the snapshot (etag " +
               std::string(got) + ", snapshot has " + std::string(expected) +
               "); run 'granary sync' to pick up the new version");
}

Result<std::string> UnderStorage::ReadRange(std::string_view key, uint64_t offset,
                                            uint64_t length) {
  std::string buf(length, '\0');
  ASSIGN_OR_RETURN(size_t n, Read(key, offset, std::span<char>(buf.data(), buf.size())));
  buf.resize(n);
  return buf;
}

UfsStats UnderStorage::stats() const {
  return UfsStats{
      .list_requests = list_requests_.load(std::memory_order_relaxed),
      .stat_requests = stat_requests_.load(std::memory_order_relaxed),
      .read_requests = read_requests_.load(std::memory_order_relaxed),
      .read_bytes = read_bytes_.load(std::memory_order_relaxed),
      .errors = errors_.load(std::memory_order_relaxed),
      .bad_list_entries = bad_list_entries_.load(std::memory_order_relaxed),
      .write_requests = write_requests_.load(std::memory_order_relaxed),
      .write_bytes = write_bytes_.load(std::memory_order_relaxed),
      .delete_requests = delete_requests_.load(std::memory_order_relaxed),
  };
}

Result<std::vector<ObjectInfo>> UnderStorage::ListRecursive(const std::string& prefix) {
  std::vector<ObjectInfo> out;
  ListRequest req{.prefix = prefix};
  do {
    ASSIGN_OR_RETURN(ListPage page, List(req));
    for (auto& o : page.objects) out.push_back(std::move(o));
    req.continuation_token = page.next_token;
  } while (!req.continuation_token.empty());
  return out;
}

Result<std::vector<ObjectInfo>> UnderStorage::ListAll(std::string_view prefix, int parallelism) {
  // Walk one level at a time with "/" until there are enough sub-prefixes to
  // keep `parallelism` workers busy (or two levels deep), then list each
  // sub-prefix recursively in parallel.
  std::vector<ObjectInfo> out;
  std::vector<std::string> frontier{std::string(prefix)};
  for (int depth = 0; depth < 2 && !frontier.empty() &&
                      frontier.size() < static_cast<size_t>(std::max(1, parallelism));
       ++depth) {
    std::vector<std::string> next;
    for (const auto& p : frontier) {
      ListRequest req{.prefix = p, .delimiter = "/"};
      do {
        ASSIGN_OR_RETURN(ListPage page, List(req));
        for (auto& o : page.objects) out.push_back(std::move(o));
        for (auto& cp : page.common_prefixes) next.push_back(std::move(cp));
        req.continuation_token = page.next_token;
      } while (!req.continuation_token.empty());
    }
    frontier = std::move(next);
  }
  std::vector<Result<std::vector<ObjectInfo>>> parts(frontier.size(),
                                                     Status(Code::kInternal, "unset"));
  ParallelFor(frontier.size(), parallelism,
              [&](size_t i) { parts[i] = ListRecursive(frontier[i]); });
  for (auto& part : parts) {
    if (!part.ok()) return part.status();
    for (auto& o : *part) out.push_back(std::move(o));
  }
  std::sort(out.begin(), out.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

}  // namespace granary
