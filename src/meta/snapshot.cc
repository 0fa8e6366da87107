// Snapshot loading (mmap + validation), queries, LoadOrBuild and Rebuild.
// Building and writing are in snapshot_build.cc.
//
// Validation before use: magic, format version, header checksum, sizes and
// offsets against the real file size, body checksum, then one pass over the
// records checking every string and inode reference is in bounds and the tree
// is well formed (each name one path component, each entry lies in its
// parent's child range, ranges do not overlap, siblings strictly
// name-sorted). After that, queries index the mapping without further checks.
//
// Thread safety: a loaded Snapshot is immutable; queries are lock-free reads.

#include "meta/snapshot.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "meta/snapshot_format.h"
#include "meta/snapshot_internal.h"

namespace granary {
namespace {

using snapshot_format::FileHeader;
using snapshot_format::Record;

bool IsDir(const Record& r) { return (r.flags & snapshot_format::kFlagDir) != 0; }

// Checks the header fields against each other and the real file size; "" if fine.
std::string CheckHeader(const FileHeader& h, uint64_t real_size) {
  if (std::memcmp(h.magic, snapshot_format::kMagic, sizeof(h.magic)) != 0) {
    return "bad magic (not a granary snapshot file)";
  }
  if (h.format_version != snapshot_format::kFormatVersion) {
    return "format version " + std::to_string(h.format_version) + ", this build reads version " +
           std::to_string(snapshot_format::kFormatVersion);
  }
  if (h.header_size < sizeof(FileHeader) || h.header_size % 8 != 0 ||
      uint64_t{h.source_uri_len} + h.prefix_len > h.header_size - sizeof(FileHeader)) {
    return "bad header size " + std::to_string(h.header_size);
  }
  if (h.header_size > real_size) {
    return "truncated: " + std::to_string(real_size) + " bytes, header alone needs " +
           std::to_string(h.header_size);
  }
  return "";
}

std::string CheckLayout(const FileHeader& h, uint64_t real_size) {
  if (h.file_size != real_size) {
    return (real_size < h.file_size ? "truncated: " : "trailing bytes: ") +
           std::to_string(real_size) + " bytes, header says " + std::to_string(h.file_size);
  }
  if (h.record_size != sizeof(Record)) return "record size " + std::to_string(h.record_size);
  if (h.entry_count == 0 || h.entry_count > snapshot_format::kMaxEntries ||
      h.entry_count > real_size / sizeof(Record)) {
    return "bad entry count " + std::to_string(h.entry_count);
  }
  if (h.records_offset != h.header_size ||
      h.strings_offset != h.records_offset + h.entry_count * sizeof(Record) ||
      h.strings_offset > h.file_size || h.strings_size != h.file_size - h.strings_offset) {
    return "inconsistent section offsets";
  }
  return "";
}

bool InStrings(uint64_t off, uint64_t len, uint64_t strings_size) {
  return off <= strings_size && len <= strings_size - off;
}

// A name the builder can write: not ".", "..", no '/' and no NUL (paths are
// looked up and listed by component).
bool IsPathComponent(std::string_view name) {
  return name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

// One pass over the records; "" if the tree is well formed.
std::string CheckRecords(const Record* rec, uint64_t n, const char* strings, uint64_t strings_size,
                         const FileHeader& h) {
  uint64_t dirs = 0, files = 0, bytes = 0, children = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const Record& r = rec[i];
    const uint64_t ino = i + 1;
    auto where = [ino] { return "record of inode " + std::to_string(ino) + ": "; };
    if ((r.flags & ~snapshot_format::kKnownFlags) != 0) return where() + "unknown flags";
    if (!InStrings(r.name_off, r.name_len, strings_size) ||
        !InStrings(r.etag_off, r.etag_len, strings_size)) {
      return where() + "string outside the string table";
    }
    if (ino == 1) {
      if (!IsDir(r) || r.parent != 1 || r.name_len != 0) return where() + "bad root";
    } else {
      if (r.name_len == 0 || r.parent < 1 || r.parent >= ino) return where() + "bad name or parent";
      if (!IsPathComponent(std::string_view(strings + r.name_off, r.name_len))) {
        return where() + "name is not one path component";
      }
      const Record& p = rec[r.parent - 1];
      if (!IsDir(p) || ino < p.first_child || ino - p.first_child >= p.child_count) {
        return where() + "not in its parent's child range";
      }
      const Record& prev = rec[i - 1];
      if (ino > 2 && prev.parent == r.parent &&
          std::string_view(strings + prev.name_off, prev.name_len) >=
              std::string_view(strings + r.name_off, r.name_len)) {
        return where() + "siblings not sorted by name";
      }
    }
    if (IsDir(r)) {
      if (r.etag_len != 0 || r.size != 0) return where() + "directory with size or etag";
      if (r.child_count == 0
              ? r.first_child != 0
              : (r.first_child <= ino || uint64_t{r.first_child} + r.child_count - 1 > n)) {
        return where() + "child range out of bounds";
      }
      children += r.child_count;
      ++dirs;
    } else {
      if (r.child_count != 0 || r.first_child != 0) return where() + "file with children";
      bytes += r.size;
      ++files;
    }
  }
  if (children != n - 1) return "child ranges overlap";
  if (dirs != h.dir_count || files != h.file_count || bytes != h.total_bytes) {
    return "counts differ from the header";
  }
  return "";
}

// The version in a file's header if the header itself is intact; 0 otherwise.
uint64_t PeekVersion(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  FileHeader h{};
  std::string buf;
  uint64_t version = 0;
  if (::pread(fd, &h, sizeof(h), 0) == static_cast<ssize_t>(sizeof(h)) &&
      CheckHeader(h, ~0ull).empty() && h.header_size <= (1u << 20)) {
    buf.resize(h.header_size);
    if (::pread(fd, buf.data(), buf.size(), 0) == static_cast<ssize_t>(buf.size())) {
      std::memset(buf.data() + offsetof(FileHeader, header_checksum), 0, sizeof(uint64_t));
      if (XXH3_64bits(buf.data(), buf.size()) == h.header_checksum) version = h.snapshot_version;
    }
  }
  ::close(fd);
  return version;
}

// Removes "<path>.tmp.<pid>.<n>" files left by builds whose process is gone
// (a crash mid-build); files of live processes are left alone.
void RemoveStaleTempFiles(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  const std::string stem = p.filename().string() + ".tmp.";
  std::error_code ec;
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.compare(0, stem.size(), stem) != 0) continue;
    long pid = std::atol(name.c_str() + stem.size());
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      GLOG_INFO("removing {} left by an interrupted snapshot build", it->path().string());
      fs::remove(it->path(), ec);
      ec.clear();
    }
  }
}

}  // namespace

Snapshot::~Snapshot() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

Result<std::unique_ptr<Snapshot>> Snapshot::Load(const std::string& file_path) {
  int fd = ::open(file_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("snapshot file " + file_path + ": does not exist");
    return ErrnoStatus("open snapshot file " + file_path, errno);
  }
  auto snap = FromFd(fd, file_path);
  ::close(fd);
  return snap;
}

Result<std::unique_ptr<Snapshot>> Snapshot::FromFd(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat snapshot file " + name, errno);
  auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(FileHeader)) {
    return Corruption("snapshot file " + name + ": truncated: " + std::to_string(size) +
                      " bytes, shorter than the header");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return ErrnoStatus("mmap snapshot file " + name, errno);
  auto snap = std::unique_ptr<Snapshot>(new Snapshot);
  snap->map_ = map;
  snap->map_size_ = size;
  snap->file_path_ = name;
  RETURN_IF_ERROR(snap->Validate(name));
  return snap;
}

Status Snapshot::Validate(const std::string& name) {
  const char* base = static_cast<const char*>(map_);
  FileHeader h;
  std::memcpy(&h, base, sizeof(h));
  auto corrupt = [&](const std::string& what) {
    return Corruption("snapshot file " + name + ": " + what);
  };
  if (std::string e = CheckHeader(h, map_size_); !e.empty()) return corrupt(e);
  std::string header(base, h.header_size);
  std::memset(header.data() + offsetof(FileHeader, header_checksum), 0, sizeof(uint64_t));
  if (XXH3_64bits(header.data(), header.size()) != h.header_checksum)
    return corrupt("header checksum mismatch");
  if (std::string e = CheckLayout(h, map_size_); !e.empty()) return corrupt(e);
  ::madvise(map_, map_size_, MADV_SEQUENTIAL);
  if (XXH3_64bits(base + h.header_size, map_size_ - h.header_size) != h.body_checksum) {
    return corrupt("body checksum mismatch");
  }
  records_ = reinterpret_cast<const Record*>(base + h.records_offset);
  strings_ = base + h.strings_offset;
  strings_size_ = h.strings_size;
  entry_count_ = h.entry_count;
  if (std::string e = CheckRecords(records_, entry_count_, strings_, strings_size_, h);
      !e.empty()) {
    return corrupt(e);
  }
  ::madvise(map_, map_size_, MADV_RANDOM);
  version_ = h.snapshot_version;
  created_ns_ = h.created_ns;
  file_count_ = h.file_count;
  dir_count_ = h.dir_count;
  total_bytes_ = h.total_bytes;
  skipped_ = SnapshotSkips{.invalid_names = h.skipped_invalid,
                           .dir_markers = h.skipped_dir_markers,
                           .file_dir_conflicts = h.skipped_conflicts};
  source_uri_.assign(base + sizeof(FileHeader), h.source_uri_len);
  prefix_.assign(base + sizeof(FileHeader) + h.source_uri_len, h.prefix_len);
  return Status::Ok();
}

const Snapshot::Record* Snapshot::record(uint64_t ino) const {
  return ino >= 1 && ino <= entry_count_ ? &records_[ino - 1] : nullptr;
}

EntryView Snapshot::View(uint64_t ino) const {
  const Record& r = records_[ino - 1];
  return EntryView{.ino = ino,
                   .parent = r.parent,
                   .is_dir = IsDir(r),
                   .name = std::string_view(strings_ + r.name_off, r.name_len),
                   .size = r.size,
                   .mtime_ns = r.mtime_ns,
                   .etag = std::string_view(strings_ + r.etag_off, r.etag_len),
                   .child_count = r.child_count};
}

std::optional<uint64_t> Snapshot::Lookup(uint64_t parent_ino, std::string_view name) const {
  const Record* p = record(parent_ino);
  if (p == nullptr || !IsDir(*p) || p->child_count == 0) return std::nullopt;
  uint64_t lo = p->first_child, hi = uint64_t{p->first_child} + p->child_count;  // [lo, hi)
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    const Record& r = records_[mid - 1];
    int c = std::string_view(strings_ + r.name_off, r.name_len).compare(name);
    if (c == 0) return mid;
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> Snapshot::FindPath(std::string_view relative_path) const {
  uint64_t ino = 1;
  size_t start = 0;
  while (start < relative_path.size()) {
    size_t end = relative_path.find('/', start);
    if (end == std::string_view::npos) end = relative_path.size();
    if (end > start) {
      auto next = Lookup(ino, relative_path.substr(start, end - start));
      if (!next) return std::nullopt;
      ino = *next;
    }
    start = end + 1;
  }
  return ino;
}

std::optional<EntryView> Snapshot::Get(uint64_t ino) const {
  if (record(ino) == nullptr) return std::nullopt;
  return View(ino);
}

std::string Snapshot::Path(uint64_t ino) const {
  if (record(ino) == nullptr) return "";
  std::vector<std::string_view> parts;
  while (ino != 1) {  // terminates: validated parent < ino
    const Record& r = records_[ino - 1];
    parts.emplace_back(strings_ + r.name_off, r.name_len);
    ino = r.parent;
  }
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!out.empty()) out += '/';
    out += *it;
  }
  return out;
}

std::string Snapshot::Key(uint64_t ino) const { return prefix_ + Path(ino); }

std::vector<EntryView> Snapshot::ReadDir(uint64_t dir_ino, uint64_t offset, size_t max) const {
  std::vector<EntryView> out;
  const Record* d = record(dir_ino);
  if (d == nullptr || !IsDir(*d) || offset >= d->child_count) return out;
  uint64_t n = std::min<uint64_t>(max, d->child_count - offset);
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(View(d->first_child + offset + i));
  return out;
}

void Snapshot::ForEachFile(const std::function<void(const EntryView&)>& fn) const {
  for (uint64_t ino = 1; ino <= entry_count_; ++ino) {
    if (!IsDir(records_[ino - 1])) fn(View(ino));
  }
}

Result<std::unique_ptr<Snapshot>> Snapshot::LoadOrBuild(UnderStorage& ufs,
                                                        const SnapshotOptions& options,
                                                        const std::string& file_path) {
  RETURN_IF_ERROR(snapshot_internal::ValidateOptions(options));
  RemoveStaleTempFiles(file_path);
  auto loaded = Load(file_path);
  uint64_t next_version = 1;
  if (loaded.ok()) {
    const Snapshot& s = **loaded;
    if (s.source_uri() == options.source_uri &&
        s.prefix() == snapshot_internal::NormalizePrefix(options.prefix)) {
      return loaded;
    }
    GLOG_WARN(
        "snapshot file {} was built for {} (prefix '{}'), not {} (prefix '{}'); listing the origin "
        "again",
        file_path, s.source_uri(), s.prefix(), options.source_uri, options.prefix);
    next_version = s.version() + 1;
  } else if (loaded.status().code() == Code::kCorruption) {
    GLOG_WARN("{}; rebuilding it from the origin {}", loaded.status().message(),
              options.source_uri);
    next_version = PeekVersion(file_path) + 1;
  } else if (loaded.status().code() != Code::kNotFound) {
    return loaded.status();
  }
  return Build(ufs, options, file_path, next_version);
}

Result<std::unique_ptr<Snapshot>> Snapshot::Rebuild(UnderStorage& ufs, const Snapshot& old,
                                                    const std::string& file_path,
                                                    int list_parallelism) {
  SnapshotOptions options{
      .source_uri = old.source_uri(), .prefix = old.prefix(), .list_parallelism = list_parallelism};
  return Build(ufs, options, file_path, old.version() + 1);
}

}  // namespace granary
