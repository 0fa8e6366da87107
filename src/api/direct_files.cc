// DirectFiles (see direct_files.h).
#include "api/direct_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>

#include "common/json_fields.h"
#include "common/log.h"
#include "store/store.h"

namespace granary {

std::unique_ptr<DirectFiles> DirectFiles::FromHello(const nlohmann::json& j) {
  if (!j.is_object()) return nullptr;
  JsonFields in(j, "hello: direct");
  std::string snapshot_path;
  auto d = std::unique_ptr<DirectFiles>(new DirectFiles());
  in.Require("snapshot", snapshot_path);
  in.Require("dataset", d->dataset_);
  in.Require("block_size", d->block_size_);
  in.Require("tiers", d->tiers_);
  in.Require("trusted_since_ns", d->trusted_since_ns_);
  if (!in.status().ok() || d->tiers_.empty() || d->block_size_ == 0) return nullptr;
  Result<std::unique_ptr<Snapshot>> snap = Snapshot::Load(snapshot_path);
  if (!snap.ok()) {
    GLOG_DEBUG("attach: reading without the daemon is off: {}", snap.status().ToString());
    return nullptr;
  }
  d->snap_ = std::move(*snap);
  // The fan-out directories, opened once: a file is then one openat of its
  // name (a directory this user may not open just is not used).
  d->subdirs_.assign(d->tiers_.size() * 256, -1);
  for (size_t t = 0; t < d->tiers_.size(); ++t) {
    for (int sub = 0; sub < 256; ++sub) {
      char name[4];
      std::snprintf(name, sizeof(name), "%02x", sub);
      d->subdirs_[t * 256 + static_cast<size_t>(sub)] =
          ::open((d->tiers_[t] + "/" + name).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
  }
  return d;
}

DirectFiles::~DirectFiles() {
  for (int fd : subdirs_)
    if (fd >= 0) ::close(fd);
}

std::optional<EntryView> DirectFiles::Find(const std::string& rel) const {
  auto ino = snap_->FindPath(rel);
  return ino ? snap_->Get(*ino) : std::nullopt;
}

FilePtr DirectFiles::Open(const std::string& rel, uint64_t* ino) const {
  std::optional<EntryView> e = Find(rel);
  if (!e || e->is_dir || e->size == 0 || e->size > block_size_) return nullptr;
  const std::string name = CacheFileName(ObjectKey{.dataset = dataset_,
                                                   .key = snap_->Key(e->ino),
                                                   .etag = std::string(e->etag),
                                                   .size = e->size});
  // The fan-out directory: the name's first two hex digits.
  int sub = 0;
  if (name.size() < 2 ||
      std::from_chars(name.data(), name.data() + 2, sub, 16).ptr != name.data() + 2) {
    return nullptr;
  }
  for (size_t tier = 0; tier < tiers_.size(); ++tier) {
    const int dir = subdirs_[tier * 256 + static_cast<size_t>(sub)];
    if (dir < 0) continue;
    int fd = ::openat(dir, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    const bool trusted =
        ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<uint64_t>(st.st_size) == e->size &&
        int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec >= trusted_since_ns_;
    if (!trusted) {
      ::close(fd);
      continue;
    }
    auto f = std::make_shared<CachedFile>();
    f->fd = fd;
    f->size = e->size;
    *ino = e->ino;
    return f;
  }
  return nullptr;
}

}  // namespace granary
