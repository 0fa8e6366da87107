// DirFs: a local directory tree as a read-only FuseFilesystem. See dir_fs.h.
#include "testing/dir_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace granary {
namespace {

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

}  // namespace

DirFs::DirFs(DirFsOptions options) : options_(std::move(options)) {
  paths_.push_back("");  // id 1: the root
  ids_[""] = kRootIno;
}

uint64_t DirFs::IdFor(const std::string& rel) {
  {
    ReaderMutexLock lock(mu_);
    auto it = ids_.find(rel);
    if (it != ids_.end()) return it->second;
  }
  WriterMutexLock lock(mu_);
  auto [it, inserted] = ids_.try_emplace(rel, paths_.size() + 1);
  if (inserted) paths_.push_back(rel);
  return it->second;
}

Result<std::string> DirFs::PathOf(uint64_t ino) const {
  ReaderMutexLock lock(mu_);
  if (ino == 0 || ino > paths_.size()) return NotFound("dirfs: no node " + std::to_string(ino));
  return Join(options_.root, paths_[ino - 1]);
}

Result<NodeAttr> DirFs::StatPath(const std::string& rel) {
  std::string full = Join(options_.root, rel);
  struct stat st;
  if (stat(full.c_str(), &st) != 0) return ErrnoStatus("dirfs: stat " + full, errno);
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return NotFound("dirfs: " + full + " is neither a file nor a directory");
  }
  return NodeAttr{
      .ino = IdFor(rel),
      .size = static_cast<uint64_t>(st.st_size),
      .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
      .is_dir = S_ISDIR(st.st_mode),
      .nlink = S_ISDIR(st.st_mode) ? 2u : 1u,
  };
}

Result<NodeAttr> DirFs::Lookup(uint64_t parent, std::string_view name) {
  if (name == "." || name == ".." || name.find('/') != std::string_view::npos) {
    return InvalidArgument("dirfs: bad name");
  }
  std::string parent_rel;
  {
    ReaderMutexLock lock(mu_);
    if (parent == 0 || parent > paths_.size()) return NotFound("dirfs: no parent node");
    parent_rel = paths_[parent - 1];
  }
  return StatPath(Join(parent_rel, name));
}

Result<NodeAttr> DirFs::GetAttr(uint64_t ino) {
  std::string rel;
  {
    ReaderMutexLock lock(mu_);
    if (ino == 0 || ino > paths_.size()) return NotFound("dirfs: no node " + std::to_string(ino));
    rel = paths_[ino - 1];
  }
  return StatPath(rel);
}

Result<OpenResult> DirFs::Open(uint64_t ino, int flags) {
  ASSIGN_OR_RETURN(std::string path, PathOf(ino));
  if (options_.offer_backing) return OpenResult{.fh = 0, .backing_path = path, .keep_cache = true};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("dirfs: open " + path, errno);
  return OpenResult{.fh = static_cast<uint64_t>(fd) + 1, .backing_path = "", .keep_cache = true};
}

Result<size_t> DirFs::Read(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out) {
  int fd = fh > 0 ? static_cast<int>(fh - 1) : -1;
  bool own = false;
  std::string path;
  if (fd < 0) {
    ASSIGN_OR_RETURN(path, PathOf(ino));
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("dirfs: open " + path, errno);
    own = true;
  }
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      if (own) ::close(fd);
      return ErrnoStatus("dirfs: pread " + std::to_string(ino), err);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (own) ::close(fd);
  return done;
}

void DirFs::Release(uint64_t ino, uint64_t fh) {
  if (fh > 0) ::close(static_cast<int>(fh - 1));
}

Result<std::shared_ptr<const std::vector<DirEntry>>> DirFs::Listing(uint64_t ino) {
  {
    ReaderMutexLock lock(mu_);
    auto it = listings_.find(ino);
    if (it != listings_.end()) return it->second;
  }
  std::string rel;
  {
    ReaderMutexLock lock(mu_);
    if (ino == 0 || ino > paths_.size()) return NotFound("dirfs: no node " + std::to_string(ino));
    rel = paths_[ino - 1];
  }
  std::string full = Join(options_.root, rel);
  DIR* d = opendir(full.c_str());
  if (d == nullptr) return ErrnoStatus("dirfs: opendir " + full, errno);
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  auto list = std::make_shared<std::vector<DirEntry>>();
  list->reserve(names.size());
  for (auto& name : names) {
    Result<NodeAttr> attr = StatPath(Join(rel, name));
    if (attr.ok()) list->push_back(DirEntry{.name = std::move(name), .attr = *attr});
  }
  WriterMutexLock lock(mu_);
  auto [it, inserted] = listings_.try_emplace(ino, std::move(list));
  return it->second;
}

Status DirFs::ReadDir(uint64_t ino, uint64_t offset, const DirEntrySink& emit) {
  ASSIGN_OR_RETURN(auto list, Listing(ino));
  for (size_t i = offset; i < list->size(); ++i) {
    if (!emit((*list)[i])) break;
  }
  return Status::Ok();
}

Result<StatFsResult> DirFs::StatFs() {
  struct statvfs s;
  if (statvfs(options_.root.c_str(), &s) != 0) return ErrnoStatus("dirfs: statvfs", errno);
  return StatFsResult{
      .total_bytes = static_cast<uint64_t>(s.f_blocks) * s.f_frsize,
      .free_bytes = static_cast<uint64_t>(s.f_bavail) * s.f_frsize,
      .total_files = s.f_files,
      .free_files = s.f_ffree,
  };
}

}  // namespace granary
