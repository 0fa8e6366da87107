// The cache-file side of cold_floor: the scratch fan-out tree and the three
// ways of creating one cache file (CacheFileWriter, declared in cold_floor.h).
// Single-threaded, like the daemon's writer it stands for.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <string_view>

#include "cold_floor.h"

namespace granary::cold_floor {
namespace {

constexpr int kFanout = 256;  // cache subdirectories, named 00..ff

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Reports the failed `op` (errno) on `path`, closes `fd` if open; returns false.
bool Fail(int fd, const char* op, const char* path, ErrorLog& log) {
  int err = errno;
  if (fd >= 0) ::close(fd);
  log.Report(path, ErrnoText(op, path, err));
  return false;
}

// pwrites `size` bytes rounded up to kAlign at offset 0, then truncates to
// `size`. On failure reports, closes `fd` and returns false.
bool FillAndTrim(int fd, const char* path, const char* data, size_t size, ErrorLog& log) {
  const size_t padded = RoundUp(size);
  ssize_t n = ::pwrite(fd, data, padded, 0);
  if (n < 0) return Fail(fd, "pwrite", path, log);
  if (static_cast<size_t>(n) != padded) {
    errno = EIO;  // a short write to a local file: report it as an I/O error
    return Fail(fd, "pwrite (short)", path, log);
  }
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) return Fail(fd, "ftruncate", path, log);
  return true;
}

// Writes "<dir>/<XX>" (XX: `fan` in hex) into `out` of PATH_MAX bytes.
void FormatSubdir(char* out, const std::string& dir, unsigned fan) {
  std::snprintf(out, PATH_MAX, "%s/%02x", dir.c_str(), fan);
}

std::string Subdir(const std::string& dir, unsigned fan) {
  char sub[PATH_MAX];
  FormatSubdir(sub, dir, fan);
  return sub;
}

}  // namespace

bool CacheFileWriter::Write(uint64_t seq, const char* data, size_t size, ErrorLog& log) {
  char name[128];
  std::snprintf(name, sizeof(name), "%s-%llu", tag_.c_str(), static_cast<unsigned long long>(seq));
  char subdir[PATH_MAX], final_path[PATH_MAX];
  FormatSubdir(subdir, dir_, static_cast<unsigned>(Fnv1a(name) & 0xff));
  int n = std::snprintf(final_path, sizeof(final_path), "%s/%s", subdir, name);
  if (n < 0 || static_cast<size_t>(n) >= sizeof(final_path)) {
    errno = ENAMETOOLONG;
    return Fail(-1, "name", subdir, log);
  }
  if (method_ == FileMethod::kTmpfile) return WriteTmpfile(subdir, final_path, data, size, log);
  return WriteRenamed(final_path, data, size, log);
}

bool CacheFileWriter::WriteRenamed(const char* final_path, const char* data, size_t size,
                                   ErrorLog& log) {
  char tmp[PATH_MAX];
  std::snprintf(tmp, sizeof(tmp), "%s.tmp", final_path);
  int flags = O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC;
  if (method_ == FileMethod::kDirect) flags |= O_DIRECT;
  int fd = ::open(tmp, flags, 0644);
  if (fd < 0) return Fail(-1, "open", tmp, log);
  if (!FillAndTrim(fd, tmp, data, size, log)) return false;
  if (::rename(tmp, final_path) != 0) return Fail(fd, "rename", tmp, log);
  if (::close(fd) != 0) return Fail(-1, "close", final_path, log);
  return true;
}

bool CacheFileWriter::WriteTmpfile(const char* subdir, const char* final_path, const char* data,
                                   size_t size, ErrorLog& log) {
  int fd = ::open(subdir, O_TMPFILE | O_WRONLY | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(-1, "open(O_TMPFILE)", subdir, log);
  if (!FillAndTrim(fd, final_path, data, size, log)) return false;
  char proc[64];
  std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  if (::linkat(AT_FDCWD, proc, AT_FDCWD, final_path, AT_SYMLINK_FOLLOW) != 0) {
    return Fail(fd, "linkat", final_path, log);
  }
  if (::close(fd) != 0) return Fail(-1, "close", final_path, log);
  return true;
}

std::string FreshTag() {
  static int runs = 0;
  char tag[64];
  std::snprintf(tag, sizeof(tag), "%llx-%x-%d", static_cast<unsigned long long>(std::time(nullptr)),
                static_cast<unsigned>(::getpid()), ++runs);
  return tag;
}

bool PrepareScratch(const std::string& dir) {
  bool created = ::mkdir(dir.c_str(), 0755) == 0;
  if (!created && errno != EEXIST) Die(ErrnoText("mkdir", dir, errno));
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) Die(ErrnoText("open", dir, errno));
  int attrs = 0;
  if (::ioctl(fd, FS_IOC_GETFLAGS, &attrs) != 0) {
    std::fprintf(stderr, "warning: %s\n", ErrnoText("FS_IOC_GETFLAGS", dir, errno).c_str());
  } else if ((attrs & FS_TOPDIR_FL) == 0) {
    attrs |= FS_TOPDIR_FL;
    if (::ioctl(fd, FS_IOC_SETFLAGS, &attrs) != 0) {
      std::fprintf(stderr, "warning: %s\n", ErrnoText("FS_IOC_SETFLAGS", dir, errno).c_str());
    }
  }
  ::close(fd);
  for (int i = 0; i < kFanout; ++i) {
    std::string sub = Subdir(dir, i);
    if (::mkdir(sub.c_str(), 0755) != 0 && errno != EEXIST) Die(ErrnoText("mkdir", sub, errno));
  }
  return created;
}

void RemoveScratch(const std::string& dir, bool created) {
  for (int i = 0; i < kFanout; ++i) {
    std::string sub = Subdir(dir, i);
    std::error_code ec;
    std::filesystem::remove_all(sub, ec);
    if (ec) std::fprintf(stderr, "warning: remove %s: %s\n", sub.c_str(), ec.message().c_str());
  }
  if (created && ::rmdir(dir.c_str()) != 0) {
    std::fprintf(stderr, "warning: %s\n", ErrnoText("rmdir", dir, errno).c_str());
  }
}

Row RunFileMode(const Flags& f, const std::string& mode, FileMethod method) {
  ErrorLog log(mode);
  AlignedBuffer data = NewAligned(f.object_size);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < RoundUp(f.object_size); ++i) data.get()[i] = static_cast<char>(rng());
  CacheFileWriter writer(f.dir, method, FreshTag());
  uint64_t ok = 0, seq = 0;
  Window w;
  w.Open(f.seconds);
  while (!w.Expired()) ok += writer.Write(seq++, data.get(), f.object_size, log) ? 1 : 0;
  return w.Close(mode, ok, log.count());
}

}  // namespace granary::cold_floor
