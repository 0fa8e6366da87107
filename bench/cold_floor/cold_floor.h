// Shared pieces of the cold_floor benchmark (see cold_floor.cc): flags, the
// measured window, error counting, aligned buffers, and the modes that live in
// their own files (cache-file writes in cache_file.cc, socket-epoll in
// socket_epoll.cc).
//
// Threads: ErrorLog is thread-safe; a Window is opened and closed by one
// thread, Expired() may be called from any thread started after Open().
#pragma once

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace granary::cold_floor {

using Clock = std::chrono::steady_clock;

constexpr size_t kAlign = 4096;            // O_DIRECT alignment of offset, length and buffer
constexpr int kPrintedErrorsPerMode = 10;  // later errors are counted, not printed

struct Flags {
  std::string url_base;            // objects are <url_base>0 .. <url_base><objects-1>
  uint64_t objects = 2000;         // objects under url_base
  size_t object_size = 112640;     // bytes per object, all the same
  int in_flight = 16;              // concurrent GETs
  double seconds = 5;              // length of each mode's window
  std::string dir;                 // scratch directory of the file modes
  std::vector<std::string> modes;  // empty: all
  bool keep = false;               // keep the files under dir
};

inline size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Prints "cold_floor: <message>" and exits 1. For setup failures.
[[noreturn]] void Die(const std::string& message);

// "<op> <what>: <strerror> (errno N)".
std::string ErrnoText(const char* op, const std::string& what, int err);

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
// A 4096-aligned heap buffer of RoundUp(size) bytes.
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;

// "HTTP status S, N bytes (want 200, W)": a response that is not the object.
std::string BadResponseText(long status, size_t bytes, size_t want);

// Allocates an AlignedBuffer for `size` bytes; exits when out of memory.
AlignedBuffer NewAligned(size_t size);

// Counts a mode's errors and prints the first kPrintedErrorsPerMode of them.
class ErrorLog {
 public:
  explicit ErrorLog(std::string mode) : mode_(std::move(mode)) {}

  // Counts one error about `object` and prints it unless enough were printed.
  void Report(const std::string& object, const std::string& what);
  uint64_t count() const { return count_.load(); }

 private:
  const std::string mode_;
  std::atomic<uint64_t> count_{0};
  std::mutex print_mu_;  // guards stderr so lines do not interleave; a leaf lock
};

// One result row: totals over a mode's window.
struct Row {
  std::string mode;
  uint64_t objects = 0;  // completed without error
  uint64_t errors = 0;
  double seconds = 0;
  double user_ms = 0, sys_ms = 0;  // this process (RUSAGE_SELF)
  double machine_ms = 0;           // all CPUs busy (/proc/stat), whoever ran
  uint64_t context_switches = 0;   // voluntary + involuntary, this process
};

// Process and machine CPU counters at one instant.
struct Usage {
  rusage self{};
  uint64_t machine_busy_ticks = 0;  // /proc/stat "cpu" line minus idle and iowait
  Clock::time_point at;
};

// The measured interval of one mode: usage at Open and at Close, and the
// deadline after which no new object is started (those in flight finish).
class Window {
 public:
  void Open(double seconds);
  bool Expired() const { return Clock::now() >= deadline_; }
  // The row for `objects` completed and `errors` failed since Open.
  Row Close(const std::string& mode, uint64_t objects, uint64_t errors) const;

 private:
  Usage before_;
  Clock::time_point deadline_;
};

// How CacheFileWriter creates a file.
enum class FileMethod {
  kDirect,    // open(name.tmp, O_CREAT|O_EXCL|O_DIRECT), pwrite, ftruncate, rename, close
  kBuffered,  // the same through the page cache
  kTmpfile,   // open(subdir, O_TMPFILE|O_DIRECT), pwrite, ftruncate, linkat, close
};

// Writes cache files "<dir>/<XX>/<tag>-<seq>", XX the hex low byte of a hash
// of the name. Single-threaded; names are fresh per writer (the tag).
class CacheFileWriter {
 public:
  CacheFileWriter(std::string dir, FileMethod method, std::string tag)
      : dir_(std::move(dir)), method_(method), tag_(std::move(tag)) {}

  // Writes `size` bytes of `data` (4096-aligned, RoundUp(size) bytes readable)
  // as file number `seq`. Returns false after reporting the failure to `log`.
  bool Write(uint64_t seq, const char* data, size_t size, ErrorLog& log);

 private:
  bool WriteRenamed(const char* final_path, const char* data, size_t size, ErrorLog& log);
  bool WriteTmpfile(const char* subdir, const char* final_path, const char* data, size_t size,
                    ErrorLog& log);

  const std::string dir_;
  const FileMethod method_;
  const std::string tag_;
};

// A name prefix no earlier run used: time, pid and a counter. Main thread only.
std::string FreshTag();

// Makes `dir`, marks it FS_TOPDIR_FL (so ext4 spreads the subdirectories made
// next over its block groups; a refusal is a warning), then makes the 256
// subdirectories 00..ff. Exits on failure. Returns whether `dir` was created.
bool PrepareScratch(const std::string& dir);

// Removes the subdirectories and their files, and `dir` if `created`.
void RemoveScratch(const std::string& dir, bool created);

// Runs one file mode (file-direct, file-buffered, file-tmpfile) for
// f.seconds on the calling thread.
Row RunFileMode(const Flags& f, const std::string& mode, FileMethod method);

// Runs the socket-epoll mode for f.seconds on the calling thread.
Row RunSocketEpoll(const Flags& f);

}  // namespace granary::cold_floor
