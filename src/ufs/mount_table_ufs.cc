// MountTableUfs: several sources under one tree (see mount_table_ufs.h).
#include "ufs/mount_table_ufs.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace granary {
namespace {

// "imagenet" -> "imagenet/"; "" -> "".
std::string Dir(const std::string& path) { return path.empty() ? "" : path + "/"; }

// Maps a key (or common prefix) of the mount back into the tree.
std::string Outer(const UfsMount& m, const std::string& inner) {
  return Dir(m.path) + inner.substr(std::min(inner.size(), m.prefix.size()));
}

}  // namespace

Result<std::shared_ptr<const MountTableUfs::Table>> MountTableUfs::Check(
    std::vector<UfsMount> mounts) {
  std::sort(mounts.begin(), mounts.end(),
            [](const UfsMount& a, const UfsMount& b) { return Dir(a.path) < Dir(b.path); });
  for (size_t i = 0; i < mounts.size(); ++i) {
    const UfsMount& m = mounts[i];
    if (!m.ufs) return InvalidArgument("mount '/" + m.path + "': no source");
    if (m.path.starts_with("/") || m.path.ends_with("/")) {
      return InvalidArgument("mount path '" + m.path + "': no leading or trailing slash");
    }
    if (!m.prefix.empty() && !m.prefix.ends_with("/")) {
      return InvalidArgument("mount '/" + m.path + "': prefix '" + m.prefix + "' must end in /");
    }
    if (i > 0) {
      const std::string prev = Dir(mounts[i - 1].path);
      if (prev.empty() || Dir(m.path).starts_with(prev)) {
        return InvalidArgument("mount '/" + m.path + "' overlaps mount '/" + mounts[i - 1].path +
                               "'");
      }
    }
  }
  return std::make_shared<const Table>(std::move(mounts));
}

Result<std::unique_ptr<MountTableUfs>> MountTableUfs::Make(std::string root,
                                                           std::vector<UfsMount> mounts) {
  std::unique_ptr<MountTableUfs> u(new MountTableUfs(std::move(root)));
  RETURN_IF_ERROR(u->SetMounts(std::move(mounts)));
  return u;
}

Status MountTableUfs::SetMounts(std::vector<UfsMount> mounts) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Table> t, Check(std::move(mounts)));
  MutexLock lock(mu_);
  table_ = std::move(t);
  return Status::Ok();
}

std::vector<UfsMount> MountTableUfs::mounts() const { return *table(); }

void MountTableUfs::Abort() {
  for (const UfsMount& m : *table()) m.ufs->Abort();
}

bool MountTableUfs::BoundsRequestTime() const {
  for (const UfsMount& m : *table()) {
    if (!m.ufs->BoundsRequestTime()) return false;
  }
  return true;
}

std::shared_ptr<const MountTableUfs::Table> MountTableUfs::table() const {
  MutexLock lock(mu_);
  return table_;
}

const UfsMount* MountTableUfs::Route(const Table& t, std::string_view key,
                                     std::string* inner) const {
  for (const UfsMount& m : t) {
    const std::string dir = Dir(m.path);
    if (key.starts_with(dir) && key.size() > dir.size()) {
      *inner = m.prefix + std::string(key.substr(dir.size()));
      return &m;
    }
  }
  return nullptr;
}

Result<ListPage> MountTableUfs::ListImpl(const ListRequest& request) {
  const std::shared_ptr<const Table> t = table();
  const std::string& p = request.prefix;
  size_t index = 0;
  std::string child_token;
  if (!request.continuation_token.empty()) {
    const std::string& tok = request.continuation_token;
    const size_t colon = tok.find(':');
    char* end = nullptr;
    index = std::strtoul(tok.c_str(), &end, 10);
    if (colon == std::string::npos || end != tok.c_str() + colon) {
      return InvalidArgument(root_ + ": bad continuation token");
    }
    child_token = tok.substr(colon + 1);
  }
  ListPage page;
  std::set<std::string> prefixes;  // mounts below the prefix, seen as directories
  for (; index < t->size(); ++index, child_token.clear()) {
    const UfsMount& m = (*t)[index];
    const std::string dir = Dir(m.path);
    std::string inner;
    if (p.starts_with(dir)) {
      inner = m.prefix + p.substr(dir.size());  // the prefix lies inside this mount
    } else if (dir.starts_with(p)) {
      if (!request.delimiter.empty()) {
        // The mount is a directory under the prefix: its next component.
        const std::string rest = dir.substr(p.size());
        prefixes.insert(p +
                        rest.substr(0, rest.find(request.delimiter) + request.delimiter.size()));
        continue;
      }
      inner = m.prefix;  // a recursive listing takes the whole mount
    } else {
      continue;
    }
    ASSIGN_OR_RETURN(ListPage child, m.ufs->List(ListRequest{.prefix = inner,
                                                             .delimiter = request.delimiter,
                                                             .continuation_token = child_token,
                                                             .max_keys = request.max_keys}));
    for (ObjectInfo& o : child.objects) {
      o.key = Outer(m, o.key);
      page.objects.push_back(std::move(o));
    }
    for (const std::string& cp : child.common_prefixes) prefixes.insert(Outer(m, cp));
    page.skipped_entries += child.skipped_entries;
    if (!child.next_token.empty()) {
      page.next_token = std::to_string(index) + ":" + child.next_token;
    } else if (index + 1 < t->size()) {
      page.next_token = std::to_string(index + 1) + ":";
    }
    break;
  }
  page.common_prefixes.assign(prefixes.begin(), prefixes.end());
  return page;
}

Result<ObjectInfo> MountTableUfs::StatImpl(std::string_view key) {
  const std::shared_ptr<const Table> t = table();
  std::string inner;
  const UfsMount* m = Route(*t, key, &inner);
  if (m == nullptr) return NotFound(root_ + "/" + std::string(key) + ": not under any mount");
  ASSIGN_OR_RETURN(ObjectInfo info, m->ufs->Stat(inner));
  info.key = std::string(key);
  return info;
}

Result<size_t> MountTableUfs::ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                                       std::string_view if_match, std::optional<uint64_t>* xxh3) {
  const std::shared_ptr<const Table> t = table();
  std::string inner;
  const UfsMount* m = Route(*t, key, &inner);
  if (m == nullptr) return NotFound(root_ + "/" + std::string(key) + ": not under any mount");
  return m->ufs->Read(inner, offset, out, if_match, xxh3);
}

Result<ObjectInfo> MountTableUfs::WriteImpl(std::string_view key, int fd, uint64_t size,
                                            const WriteOptions& options) {
  const std::shared_ptr<const Table> t = table();
  std::string inner;
  const UfsMount* m = Route(*t, key, &inner);
  if (m == nullptr) return NotFound(root_ + "/" + std::string(key) + ": not under any mount");
  ASSIGN_OR_RETURN(ObjectInfo info, m->ufs->Write(inner, fd, size, options));
  info.key = std::string(key);
  return info;
}

Status MountTableUfs::DeleteImpl(std::string_view key) {
  const std::shared_ptr<const Table> t = table();
  std::string inner;
  const UfsMount* m = Route(*t, key, &inner);
  if (m == nullptr) return NotFound(root_ + "/" + std::string(key) + ": not under any mount");
  return m->ufs->Delete(inner);
}

namespace {

// An upload on a mounted connector, which it keeps alive (a SetMounts during
// the upload does not pull it away).
class RoutedUpload final : public StreamingUpload {
 public:
  RoutedUpload(std::string key, std::shared_ptr<UnderStorage> ufs,
               std::unique_ptr<StreamingUpload> inner)
      : key_(std::move(key)), ufs_(std::move(ufs)), inner_(std::move(inner)) {}
  const std::string& id() const override { return inner_->id(); }
  uint64_t part_size() const override { return inner_->part_size(); }
  void AddPart(uint64_t index) override { inner_->AddPart(index); }

 protected:
  Result<ObjectInfo> Complete(uint64_t size) override {
    ASSIGN_OR_RETURN(ObjectInfo info, ufs_->CompleteUpload(*inner_, size));
    info.key = key_;  // the key as the table shows it
    return info;
  }

 private:
  std::string key_;
  std::shared_ptr<UnderStorage> ufs_;
  std::unique_ptr<StreamingUpload> inner_;
};

}  // namespace

Result<std::unique_ptr<StreamingUpload>> MountTableUfs::StartUploadImpl(
    std::string_view key, int fd, const WriteOptions& options) {
  const std::shared_ptr<const Table> t = table();
  std::string inner;
  const UfsMount* m = Route(*t, key, &inner);
  if (m == nullptr) return NotFound(root_ + "/" + std::string(key) + ": not under any mount");
  ASSIGN_OR_RETURN(std::unique_ptr<StreamingUpload> up, m->ufs->StartUpload(inner, fd, options));
  return std::unique_ptr<StreamingUpload>(
      std::make_unique<RoutedUpload>(std::string(key), m->ufs, std::move(up)));
}

Status MountTableUfs::AbortUploadImpl(std::string_view key, std::string_view upload_id) {
  const std::shared_ptr<const Table> t = table();
  std::string inner;
  const UfsMount* m = Route(*t, key, &inner);
  if (m == nullptr) return NotFound(root_ + "/" + std::string(key) + ": not under any mount");
  return m->ufs->AbortUpload(inner, upload_id);
}

}  // namespace granary
