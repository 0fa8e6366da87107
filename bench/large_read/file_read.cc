#include "large_read/file_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace granary::bench {
namespace {

constexpr size_t kDirectAlign = 4096;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

class FileReader {
 public:
  explicit FileReader(FileReadOptions o)
      : o_(std::move(o)),
        buf_(static_cast<char*>(std::aligned_alloc(
            kDirectAlign, (o_.read_bytes + kDirectAlign - 1) / kDirectAlign * kDirectAlign))) {}

  FileOutcome operator()(const ManifestEntry& e) {
    const auto t0 = std::chrono::steady_clock::now();
    FileOutcome out{.path = e.path};
    const std::string full = o_.root + "/" + e.path;
    const int flags = O_RDONLY | O_CLOEXEC | (o_.io == IoMode::kDirect ? O_DIRECT : 0);
    int fd = ::open(full.c_str(), flags);
    if (fd < 0) {
      out.error = std::string("open: ") + std::strerror(errno);
      return out;
    }
    StreamChecksum sum;
    out.error =
        o_.io == IoMode::kMmap ? ReadMapped(fd, &sum, &out.bytes) : ReadCalls(fd, &sum, &out.bytes);
    ::close(fd);
    if (out.error.empty()) out.error = Verify(e, out.bytes, sum);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }

 private:
  std::string ReadCalls(int fd, StreamChecksum* sum, uint64_t* bytes) {
    for (;;) {
      ssize_t n = ::read(fd, buf_.get(), o_.read_bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return std::string("read: ") + std::strerror(errno);
      if (n == 0) return "";
      sum->Update(buf_.get(), static_cast<size_t>(n));
      *bytes += static_cast<uint64_t>(n);
    }
  }

  std::string ReadMapped(int fd, StreamChecksum* sum, uint64_t* bytes) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return std::string("fstat: ") + std::strerror(errno);
    const size_t size = static_cast<size_t>(st.st_size);
    if (size == 0) return "";
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return std::string("mmap: ") + std::strerror(errno);
    ::madvise(m, size, MADV_SEQUENTIAL);
    const char* p = static_cast<const char*>(m);
    for (size_t off = 0; off < size; off += o_.read_bytes) {
      sum->Update(p + off, std::min(o_.read_bytes, size - off));
    }
    ::munmap(m, size);
    *bytes = size;
    return "";
  }

  const FileReadOptions o_;
  std::unique_ptr<char, FreeDeleter> buf_;
};

}  // namespace

std::string ValidateFileRead(const FileReadOptions& o) {
  if (o.read_bytes == 0) return "--read-kib must be > 0";
  if (o.io == IoMode::kDirect && o.read_bytes % kDirectAlign != 0) {
    return "--io direct needs --read-kib a multiple of 4";
  }
  return "";
}

FileWorker MakeFileReader(const FileReadOptions& o) {
  return [r = std::make_shared<FileReader>(o)](const ManifestEntry& e) { return (*r)(e); };
}

const char* IoModeName(IoMode io) {
  switch (io) {
    case IoMode::kRead: return "read";
    case IoMode::kMmap: return "mmap";
    case IoMode::kDirect: return "direct";
  }
  return "?";
}

}  // namespace granary::bench
