// PosixUfs implementation: sorted directory walks for listing, stat(2), pread.
// See posix_ufs.h for the contract.
#include "ufs/posix_ufs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/units.h"
#include "ufs/deadline_runner.h"

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

// One directory entry that is a file or a directory (symlinks resolved).
struct DirEntry {
  // The name, with "/" appended for a directory: sorting siblings by this and
  // walking depth-first yields keys in global bytewise order ("a-b" < "a/x").
  std::string sort_key;
  bool is_dir = false;
};

// A directory's entries sorted by sort_key.
using SortedDir = std::vector<DirEntry>;

// Reads and sorts the open directory `fd` (which it closes). Broken symlinks,
// vanished entries and special files are left out.
Result<std::shared_ptr<const SortedDir>> ReadDirSorted(int fd, const std::string& path) {
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(path, err);
  }
  auto out = std::make_shared<SortedDir>();
  errno = 0;
  while (struct dirent* de = ::readdir(dir)) {
    std::string_view name = de->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = de->d_type == DT_DIR;
    if (de->d_type != DT_DIR && de->d_type != DT_REG) {  // symlink or unknown: ask stat
      struct stat st {};
      if (::fstatat(fd, de->d_name, &st, 0) != 0) {
        GLOG_DEBUG("posix list: skipping {}/{}: {}", path, name, std::strerror(errno));
        errno = 0;
        continue;
      }
      if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) continue;  // fifo, socket, device
      is_dir = S_ISDIR(st.st_mode);
    }
    out->push_back(DirEntry{.sort_key = is_dir ? std::string(name) + "/" : std::string(name),
                            .is_dir = is_dir});
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoStatus(path, err);
  std::sort(out->begin(), out->end(),
            [](const DirEntry& a, const DirEntry& b) { return a.sort_key < b.sort_key; });
  return std::shared_ptr<const SortedDir>(std::move(out));
}

// The sorted contents of recently listed directories, so that paging through
// a directory of N entries costs O(N log N) once rather than per page. An
// entry is reused only for continuation pages (a first page always re-reads)
// and only while the directory's inode and mtime are unchanged.
// Thread safety: thread-safe.
class DirCache {
 public:
  // The sorted entries of directory `path`; empty when it does not exist or
  // is not a directory.
  Result<std::shared_ptr<const SortedDir>> Get(const std::string& path, bool allow_cached) {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return std::make_shared<const SortedDir>();
      return ErrnoStatus(path, errno);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(path, err);
    }
    const Version version{.dev = st.st_dev, .ino = st.st_ino, .mtime_ns = MtimeNanos(st)};
    if (allow_cached) {
      MutexLock lock(mu_);
      for (auto it = slots_.begin(); it != slots_.end(); ++it) {
        if (it->path == path && it->version == version) {
          slots_.splice(slots_.begin(), slots_, it);
          ::close(fd);
          return slots_.front().dir;
        }
      }
    }
    ASSIGN_OR_RETURN(std::shared_ptr<const SortedDir> dir, ReadDirSorted(fd, path));
    MutexLock lock(mu_);
    std::erase_if(slots_, [&](const Slot& s) { return s.path == path; });
    slots_.push_front(Slot{.path = path, .version = version, .dir = dir});
    if (slots_.size() > kSlots) slots_.pop_back();
    return dir;
  }

 private:
  struct Version {
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
    bool operator==(const Version&) const = default;
  };
  struct Slot {
    std::string path;
    Version version;
    std::shared_ptr<const SortedDir> dir;
  };
  static constexpr size_t kSlots = 16;

  Mutex mu_;                               // guards slots_; leaf lock
  std::list<Slot> slots_ GUARDED_BY(mu_);  // most recently used first
};

// Builds one page of a listing by walking directories in key order, skipping
// whatever sorts at or before the continuation token, until one entry past
// the page is seen (so next_token is only set when more entries exist).
class PageBuilder {
 public:
  PageBuilder(const ListRequest& req, DirCache& cache) : req_(req), cache_(cache) {}

  // Lists `dir_key` (a directory key ending in "/", or "" for the root),
  // restricted at its top level to names starting with `name_prefix`.
  Status Walk(const std::string& dir_key, std::string_view name_prefix) {
    ASSIGN_OR_RETURN(std::shared_ptr<const SortedDir> dir,
                     cache_.Get(PathOf(dir_key), !req_.continuation_token.empty()));
    for (auto it = Start(*dir, dir_key, name_prefix); it != dir->end() && !full_; ++it) {
      if (!it->sort_key.starts_with(name_prefix)) break;  // names with the prefix are contiguous
      std::string key = dir_key + it->sort_key;
      if (!it->is_dir) {
        if (After(key)) EmitObject(key);
        continue;
      }
      if (!req_.delimiter.empty()) {
        if (After(key) && !req_.continuation_token.starts_with(key)) EmitPrefix(key);
        continue;
      }
      // Recursive: descend unless the whole subtree sorts before the token.
      if (!After(key) && !req_.continuation_token.starts_with(key)) continue;
      struct stat st {};
      if (::stat(PathOf(key).c_str(), &st) != 0 || OnStack(st)) continue;
      stack_.emplace_back(st.st_dev, st.st_ino);
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
  // The first entry of `dir` that may hold keys after the token: a binary
  // search instead of a scan, so a continuation page in a huge directory
  // starts where the last one ended.
  SortedDir::const_iterator Start(const SortedDir& dir, const std::string& dir_key,
                                  std::string_view name_prefix) const {
    auto by_key = [](const DirEntry& e, std::string_view k) { return e.sort_key < k; };
    auto it = std::lower_bound(dir.begin(), dir.end(), name_prefix, by_key);
    const std::string& token = req_.continuation_token;
    if (token.empty() || !token.starts_with(dir_key)) return it;
    std::string_view rest = std::string_view(token).substr(dir_key.size());
    auto after =
        std::upper_bound(dir.begin(), dir.end(), rest,
                         [](std::string_view k, const DirEntry& e) { return k < e.sort_key; });
    // A directory holding the token sorts before it but still has keys after it.
    if (after != dir.begin() && std::prev(after)->is_dir &&
        rest.starts_with(std::prev(after)->sort_key)) {
      --after;
    }
    return std::max(it, after);
  }

  bool After(const std::string& key) const {
    return req_.continuation_token.empty() || key > req_.continuation_token;
  }

  bool OnStack(const struct stat& st) const {
    bool loop =
        std::find(stack_.begin(), stack_.end(), std::pair(st.st_dev, st.st_ino)) != stack_.end();
    if (loop) GLOG_DEBUG("posix list: skipping a symlink loop");
    return loop;
  }

  // False when the page is already full (then next_token is set).
  bool Reserve() {
    if (count_ < req_.max_keys) return true;
    page_.next_token = last_;
    full_ = true;
    return false;
  }

  void EmitObject(const std::string& key) {
    struct stat st {};
    if (::stat(PathOf(key).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // vanished
    if (!Reserve()) return;
    page_.objects.push_back(InfoFromStat(key, st));
    last_ = key;
    ++count_;
  }

  void EmitPrefix(const std::string& key) {
    if (!Reserve()) return;
    page_.common_prefixes.push_back(key);
    last_ = key;
    ++count_;
  }

  const ListRequest& req_;
  DirCache& cache_;
  ListPage page_;
  std::vector<std::pair<dev_t, ino_t>> stack_;  // (dev, inode) of directories being walked
  std::string last_;
  int count_ = 0;
  bool full_ = false;
};

Status CheckRegular(const std::string& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return NotFound(path + ": is a directory, not a file");
  if (!S_ISREG(st.st_mode)) return NotFound(path + ": not a regular file");
  return Status::Ok();
}

// One page of a listing (blocking: readdir and stat).
Result<ListPage> ListPageOf(const ListRequest& request, DirCache& cache) {
  size_t slash = request.prefix.rfind('/');
  std::string dir_key = slash == std::string::npos ? "" : request.prefix.substr(0, slash + 1);
  std::string name_prefix = request.prefix.substr(dir_key.size());
  PageBuilder builder(request, cache);
  struct stat st {};
  if (::stat(PathOf(dir_key).c_str(), &st) == 0) builder.PushRoot(st);
  RETURN_IF_ERROR(builder.Walk(dir_key, name_prefix));
  return builder.Take();
}

Result<ObjectInfo> StatFile(const std::string& key) {
  std::string path = PathOf(key);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path, errno);
  RETURN_IF_ERROR(CheckRegular(path, st));
  return InfoFromStat(key, st);
}

// Bytes read by a helper thread into memory it owns (a timed-out read may
// finish after its caller's buffer is gone).
struct OwnedBytes {
  std::unique_ptr<char[]> data;
  size_t size = 0;
};

// Every blocking call runs through `runner_`, so a hung NFS server costs a
// caller at most the timeout (see deadline_runner.h).
class PosixUfs : public UnderStorage {
 public:
  explicit PosixUfs(DeadlineRunnerOptions deadline) : runner_(deadline) {}

  std::string Root() const override { return std::string(kRoot); }
  void Abort() override { runner_.Abort(); }

 protected:
  Result<ListPage> ListImpl(const ListRequest& request) override {
    RETURN_IF_ERROR(CheckKey(request.prefix));
    if (!request.delimiter.empty() && request.delimiter != "/") {
      return InvalidArgument(std::string(kRoot) + ": list delimiter '" + request.delimiter +
                             "' is not supported (use \"/\" or none)");
    }
    return runner_.Run<ListPage>(
        "origin listing of " + PathOf(request.prefix),
        [request, cache = dir_cache_] { return ListPageOf(request, *cache); });
  }

  Result<ObjectInfo> StatImpl(std::string_view key) override {
    RETURN_IF_ERROR(CheckKey(key));
    return runner_.Run<ObjectInfo>("origin stat of " + PathOf(key),
                                   [k = std::string(key)] { return StatFile(k); });
  }

  Result<size_t> ReadImpl(std::string_view key, uint64_t offset, std::span<char> out,
                          std::string_view if_match, std::optional<uint64_t>* /*xxh3*/) override {
    RETURN_IF_ERROR(CheckKey(key));
    if (!runner_.has_deadline()) return ReadFile(key, offset, out, if_match);
    ASSIGN_OR_RETURN(OwnedBytes got,
                     runner_.Run<OwnedBytes>(
                         "origin read of " + PathOf(key),
                         [k = std::string(key), offset, n = out.size(),
                          m = std::string(if_match)]() -> Result<OwnedBytes> {
                           OwnedBytes b{.data = std::make_unique_for_overwrite<char[]>(n)};
                           ASSIGN_OR_RETURN(
                               b.size, ReadFile(k, offset, std::span<char>(b.data.get(), n), m));
                           return b;
                         }));
    std::memcpy(out.data(), got.data.get(), got.size);
    return got.size;
  }

  // A temporary name in the target's directory, fsynced, renamed into place:
  // readers see the old file or the whole new one, never a part. Runs on
  // the caller's thread (an upload thread), without the read deadline.
  Result<ObjectInfo> WriteImpl(std::string_view key, int fd, uint64_t size,
                               const WriteOptions& options) override {
    RETURN_IF_ERROR(CheckKey(key));
    const std::string path = PathOf(key);
    const std::filesystem::path target(path);
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) return IoError(target.parent_path().string() + ": cannot create: " + ec.message());
    std::random_device rd;
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".granary-%d-%08x", static_cast<int>(::getpid()), rd());
    const std::string tmp =
        (target.parent_path() / ("." + target.filename().string() + suffix)).string();
    int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) return ErrnoStatus(tmp, errno);
    Status copied = CopyAndSync(fd, out, size, tmp);
    if (::close(out) != 0 && copied.ok()) copied = ErrnoStatus(tmp, errno);
    if (copied.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) copied = ErrnoStatus(path, errno);
    if (!copied.ok()) {
      ::unlink(tmp.c_str());
      return copied;
    }
    int dfd = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    return StatFile(std::string(key));
  }

  Status DeleteImpl(std::string_view key) override {
    RETURN_IF_ERROR(CheckKey(key));
    const std::string path = PathOf(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(path, errno);
    return Status::Ok();
  }

 private:
  static Status CopyAndSync(int in, int out, uint64_t size, const std::string& what) {
    std::vector<char> buf(1 << 20);
    uint64_t off = 0;
    while (off < size) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
      ssize_t n = ::pread(in, buf.data(), want, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError(what + ": reading the staged file: " + std::strerror(errno));
      if (n == 0)
        return IoError(what + ": the staged file is shorter than " + std::to_string(size) +
                       " bytes");
      size_t done = 0;
      while (done < static_cast<size_t>(n)) {
        ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n) - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ErrnoStatus(what, errno);
        done += static_cast<size_t>(w);
      }
      off += static_cast<uint64_t>(n);
    }
    if (::fsync(out) != 0) return ErrnoStatus(what, errno);
    return Status::Ok();
  }

  // Reads [offset, offset + out.size()) of `key` into `out` (blocking: open,
  // fstat, pread); the count, short only at the end of the file.
  static Result<size_t> ReadFile(std::string_view key, uint64_t offset, std::span<char> out,
                                 std::string_view if_match) {
    std::string path = PathOf(key);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    FdCloser closer(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return ErrnoStatus(path, errno);
    RETURN_IF_ERROR(CheckRegular(path, st));
    if (!if_match.empty()) {
      std::string got = InfoFromStat(std::string(key), st).etag;
      if (got != if_match) return EtagMismatch(path, if_match, got);
    }
    size_t total = 0;
    while (total < out.size()) {
      ssize_t n =
          ::pread(fd, out.data() + total, out.size() - total, static_cast<off_t>(offset + total));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(path, errno);
      }
      if (n == 0) break;
      total += static_cast<size_t>(n);
    }
    return total;
  }

  std::shared_ptr<DirCache> dir_cache_ = std::make_shared<DirCache>();  // shared with helpers
  DeadlineRunner runner_;                                               // last: destroyed first
};

// Parses the POSIX connector's options (docs/configuration.md).
Result<DeadlineRunnerOptions> ParsePosixOptions(const UfsOptions& options) {
  DeadlineRunnerOptions out;
  for (const auto& [k, v] : options.options) {
    if (k == "requestTimeout") {
      auto d = ParseDuration(v);
      if (!d.ok()) return InvalidArgument("posix option requestTimeout: " + d.status().message());
      out.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
    } else if (k == "maxStuckCalls") {
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 4096) {
        return InvalidArgument("posix option maxStuckCalls: '" + v +
                               "' is not an integer in [1, 4096]");
      }
      out.max_stuck = static_cast<int>(n);
    } else {
      return InvalidArgument(std::string(kRoot) + ": unknown option '" + k +
                             "' (known: requestTimeout, maxStuckCalls)");
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<UnderStorage>> NewPosixUfs(const Uri& uri, const UfsOptions& options) {
  if (uri.scheme != Scheme::kFile) {
    return InvalidArgument(uri.ToString() + ": not a file:// URI or path");
  }
  ASSIGN_OR_RETURN(DeadlineRunnerOptions deadline, ParsePosixOptions(options));
  if (!options.secrets.empty()) {
    return InvalidArgument(std::string(kRoot) + ": unexpected secret '" +
                           options.secrets.begin()->first + "' (the POSIX connector takes none)");
  }
  return std::unique_ptr<UnderStorage>(std::make_unique<PosixUfs>(deadline));
}

}  // namespace granary
