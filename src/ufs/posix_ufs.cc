// PosixUfs implementation: sorted directory walks for listing, stat(2), pread.
// See posix_ufs.h for the contract.
#include "ufs/posix_ufs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "common/log.h"

namespace granary {
namespace {

constexpr std::string_view kRoot = "file:///";

std::string PathOf(std::string_view key) { return "/" + std::string(key); }

int64_t MtimeNanos(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

ObjectInfo InfoFromStat(std::string key, const struct stat& st) {
  int64_t mtime = MtimeNanos(st);
  auto size = static_cast<uint64_t>(st.st_size);
  return ObjectInfo{.key = std::move(key),
                    .size = size,
                    .mtime_ns = mtime,
                    .etag = std::to_string(mtime) + "-" + std::to_string(size)};
}

Status CheckKey(std::string_view key) {
  if (key.find('\0') != std::string_view::npos) {
    return InvalidArgument(std::string(kRoot) + ": key contains a NUL byte");
  }
  return Status::Ok();
}

// Closes a file descriptor or DIR* on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// One directory entry that is a listable object or directory (symlinks resolved).
struct DirEntry {
  std::string name;
  bool is_dir = false;
  struct stat st {};
  // Bytewise position among siblings: directories sort as "name/", so walking
  // siblings in this order yields keys in global bytewise order.
  std::string SortKey() const { return is_dir ? name + "/" : name; }
};

// The entries of directory `path` whose names start with `name_prefix`, in
// key order. A missing directory (or a non-directory) has no entries.
Result<std::vector<DirEntry>> ReadDirSorted(const std::string& path, std::string_view name_prefix) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::vector<DirEntry>{};
    return ErrnoStatus(path, errno);
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(path, err);
  }
  std::vector<DirEntry> out;
  errno = 0;
  while (struct dirent* de = ::readdir(dir)) {
    std::string_view name = de->d_name;
    if (name == "." || name == ".." || !name.starts_with(name_prefix)) continue;
    DirEntry e{.name = std::string(name)};
    if (::fstatat(fd, de->d_name, &e.st, 0) != 0) {
      // Broken symlink, or the entry vanished while we listed: not an object.
      GLOG_DEBUG("posix list: skipping {}/{}: {}", path, name, std::strerror(errno));
      errno = 0;
      continue;
    }
    if (S_ISDIR(e.st.st_mode)) {
      e.is_dir = true;
    } else if (!S_ISREG(e.st.st_mode)) {
      continue;  // sockets, fifos, devices are not objects
    }
    out.push_back(std::move(e));
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoStatus(path, err);
  std::sort(out.begin(), out.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.SortKey() < b.SortKey(); });
  return out;
}

// Builds one page of a listing by walking directories in key order, skipping
// whatever sorts at or before the continuation token, until one entry past
// the page is seen (so next_token is only set when more entries exist).
class PageBuilder {
 public:
  explicit PageBuilder(const ListRequest& req) : req_(req) {}

  // Lists `dir_key` (a directory key ending in "/", or "" for the root),
  // restricted at its top level to names starting with `name_prefix`.
  Status Walk(const std::string& dir_key, std::string_view name_prefix) {
    ASSIGN_OR_RETURN(std::vector<DirEntry> entries, ReadDirSorted(PathOf(dir_key), name_prefix));
    for (const DirEntry& e : entries) {
      if (full_) return Status::Ok();
      std::string key = dir_key + e.SortKey();
      if (!e.is_dir) {
        if (After(key)) Emit(key, e.st, false);
        continue;
      }
      if (!req_.delimiter.empty()) {
        if (After(key) && !req_.continuation_token.starts_with(key)) Emit(key, e.st, true);
        continue;
      }
      // Recursive: descend unless the whole subtree sorts before the token.
      bool subtree_done = !After(key) && !req_.continuation_token.starts_with(key);
      if (subtree_done || OnStack(e.st)) continue;
      stack_.emplace_back(e.st.st_dev, e.st.st_ino);
      Status s = Walk(key, "");
      stack_.pop_back();
      RETURN_IF_ERROR(s);
    }
    return Status::Ok();
  }

  // Marks `st` (the directory being listed) as an ancestor for loop detection.
  void PushRoot(const struct stat& st) { stack_.emplace_back(st.st_dev, st.st_ino); }

  ListPage Take() { return std::move(page_); }

 private:
  bool After(const std::string& key) const {
    return req_.continuation_token.empty() || key > req_.continuation_token;
  }

  bool OnStack(const struct stat& st) const {
    bool loop = std::find(stack_.begin(), stack_.end(), std::pair(st.st_dev, st.st_ino)) != stack_.end();
    if (loop) GLOG_DEBUG("posix list: skipping a symlink loop");
    return loop;
  }

  void Emit(const std::string& key, const struct stat& st, bool is_prefix) {
    if (count_ == req_.max_keys) {
      page_.next_token = last_;
      full_ = true;
      return;
    }
    if (is_prefix) {
      page_.common_prefixes.push_back(key);
    } else {
      page_.objects.push_back(InfoFromStat(key, st));
    }
    last_ = key;
    ++count_;
  }

  const ListRequest& req_;
  ListPage page_;
  std::vector<std::pair<dev_t, ino_t>> stack_;  // (dev, inode) of directories being walked
  std::string last_;
  int count_ = 0;
  bool full_ = false;
};

class PosixUfs : public UnderStorage {
 public:
  std::string Root() const override { return std::string(kRoot); }

 protected:
  Result<ListPage> ListImpl(const ListRequest& request) override {
    RETURN_IF_ERROR(CheckKey(request.prefix));
    if (!request.delimiter.empty() && request.delimiter != "/") {
      return InvalidArgument(std::string(kRoot) + ": list delimiter '" + request.delimiter +
                             "' is not supported (use \"/\" or none)");
    }
    size_t slash = request.prefix.rfind('/');
    std::string dir_key = slash == std::string::npos ? "" : request.prefix.substr(0, slash + 1);
    std::string name_prefix = request.prefix.substr(dir_key.size());
    PageBuilder builder(request);
    struct stat st {};
    if (::stat(PathOf(dir_key).c_str(), &st) == 0) builder.PushRoot(st);
    RETURN_IF_ERROR(builder.Walk(dir_key, name_prefix));
    return builder.Take();
  }

  Result<ObjectInfo> StatImpl(std::string_view key) override {
    RETURN_IF_ERROR(CheckKey(key));
    std::string path = PathOf(key);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path, errno);
    RETURN_IF_ERROR(CheckRegular(path, st));
    return InfoFromStat(std::string(key), st);
  }

  Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out) override {
    RETURN_IF_ERROR(CheckKey(key));
    std::string path = PathOf(key);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    FdCloser closer(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return ErrnoStatus(path, errno);
    RETURN_IF_ERROR(CheckRegular(path, st));
    size_t total = 0;
    while (total < out.size()) {
      ssize_t n = ::pread(fd, out.data() + total, out.size() - total,
                          static_cast<off_t>(offset + total));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(path, errno);
      }
      if (n == 0) break;
      total += static_cast<size_t>(n);
    }
    return total;
  }

 private:
  static Status CheckRegular(const std::string& path, const struct stat& st) {
    if (S_ISDIR(st.st_mode)) return NotFound(path + ": is a directory, not a file");
    if (!S_ISREG(st.st_mode)) return NotFound(path + ": not a regular file");
    return Status::Ok();
  }
};

}  // namespace

Result<std::unique_ptr<UnderStorage>> NewPosixUfs(const Uri& uri, const UfsOptions& options) {
  if (uri.scheme != Scheme::kFile) {
    return InvalidArgument(uri.ToString() + ": not a file:// URI or path");
  }
  if (!options.options.empty()) {
    return InvalidArgument(std::string(kRoot) + ": unknown option '" + options.options.begin()->first +
                           "' (the POSIX connector takes no options)");
  }
  if (!options.secrets.empty()) {
    return InvalidArgument(std::string(kRoot) + ": unexpected secret '" +
                           options.secrets.begin()->first + "' (the POSIX connector takes none)");
  }
  return std::unique_ptr<UnderStorage>(std::make_unique<PosixUfs>());
}

}  // namespace granary
