// Building a snapshot: listing -> tree of entries in inode order -> file.
//
// The tree is made in memory (one node per entry, directories found through a
// hash map of their paths), each directory's children sorted by name bytes,
// then numbered breadth-first so children are contiguous. The file is written
// under a temporary name in the target directory, fsync'd, validated by
// mapping it, renamed into place and the directory fsync'd: a crash leaves
// either the old file or the new one, never a mix.
//
// Thread safety: Build* may run on any thread; nothing here is shared.

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common/clock.h"
#include "common/file_modes.h"
#include "common/log.h"
#include "meta/snapshot.h"
#include "meta/snapshot_format.h"
#include "meta/snapshot_internal.h"

namespace granary {
namespace {

using snapshot_format::FileHeader;
using snapshot_format::Record;

constexpr uint32_t kNoObject = 0xFFFFFFFF;

struct Node {
  std::string_view name;           // into an ObjectInfo key or a dir-map key
  uint32_t object = kNoObject;     // index into the listing; kNoObject for directories
  std::vector<uint32_t> children;  // directories: node ids
  bool is_dir() const { return object == kNoObject; }
};

// The tree of valid entries. Node 0 is the root.
class TreeBuilder {
 public:
  explicit TreeBuilder(const std::vector<ObjectInfo>& objects) : objects_(objects) {
    nodes_.push_back(Node{});
    dirs_.emplace("", 0);
  }

  // Adds object i whose relative path is `rel` (already validated).
  void AddFile(uint32_t i, std::string_view rel) {
    size_t slash = rel.rfind('/');
    std::string_view dir =
        slash == std::string_view::npos ? std::string_view() : rel.substr(0, slash);
    if (dir != last_dir_path_) {
      last_dir_ = DirNode(dir);
      last_dir_path_ = dir;
    }
    auto id = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back(Node{.name = rel.substr(slash + 1), .object = i});
    nodes_[last_dir_].children.push_back(id);
  }

  // Adds the directory `rel` (already validated, no trailing slash) and its
  // parents: an S3 directory marker ("dir/", a zero-byte object the S3
  // console and many tools create) shows as a directory even when empty.
  void AddDir(std::string_view rel) { DirNode(rel); }

  // Sorts children by name and drops files that share a name with a
  // directory; returns how many were dropped.
  uint64_t SortAndResolve() {
    uint64_t conflicts = 0;
    for (auto& node : nodes_) {
      if (!node.is_dir()) continue;
      auto& ch = node.children;
      std::sort(ch.begin(), ch.end(), [&](uint32_t a, uint32_t b) {
        if (nodes_[a].name != nodes_[b].name) return nodes_[a].name < nodes_[b].name;
        return nodes_[a].is_dir() && !nodes_[b].is_dir();  // the directory first
      });
      auto last = std::unique(ch.begin(), ch.end(), [&](uint32_t a, uint32_t b) {
        return nodes_[a].name == nodes_[b].name;
      });
      conflicts += static_cast<uint64_t>(ch.end() - last);
      ch.erase(last, ch.end());
    }
    return conflicts;
  }

  // Node ids in inode order (breadth-first); first_child[i] for each position.
  std::vector<uint32_t> InodeOrder() const {
    std::vector<uint32_t> order{0};
    order.reserve(nodes_.size());
    for (size_t pos = 0; pos < order.size(); ++pos) {
      for (uint32_t c : nodes_[order[pos]].children) order.push_back(c);
    }
    return order;
  }

  const Node& node(uint32_t id) const { return nodes_[id]; }
  size_t node_count() const { return nodes_.size(); }

 private:
  uint32_t DirNode(std::string_view path) {
    auto it = dirs_.find(std::string(path));
    if (it != dirs_.end()) return it->second;
    size_t slash = path.rfind('/');
    uint32_t parent =
        DirNode(slash == std::string_view::npos ? std::string_view() : path.substr(0, slash));
    auto id = static_cast<uint32_t>(nodes_.size());
    auto [ins, ok] = dirs_.emplace(std::string(path), id);
    std::string_view key = ins->first;  // stable: unordered_map nodes do not move
    nodes_.push_back(Node{.name = key.substr(slash + 1)});
    nodes_[parent].children.push_back(id);
    return id;
  }

  const std::vector<ObjectInfo>& objects_;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, uint32_t> dirs_;  // relative dir path -> node id
  std::string_view last_dir_path_;                  // cache for sorted input
  uint32_t last_dir_ = 0;
};

// Buffered writer that also hashes what it writes.
class ChecksumWriter {
 public:
  ChecksumWriter(int fd, std::string name) : fd_(fd), name_(std::move(name)) {
    XXH3_64bits_reset(state_.get());
    buf_.reserve(kBuf);
  }
  Status Append(const void* data, size_t n) {
    XXH3_64bits_update(state_.get(), data, n);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      size_t take = std::min(n, kBuf - buf_.size());
      buf_.append(p, take);
      p += take;
      n -= take;
      if (buf_.size() == kBuf) RETURN_IF_ERROR(Flush());
    }
    return Status::Ok();
  }
  Status Flush() {
    RETURN_IF_ERROR(WriteAll(fd_, buf_.data(), buf_.size(), offset_, name_));
    offset_ += buf_.size();
    buf_.clear();
    return Status::Ok();
  }
  uint64_t digest() const { return XXH3_64bits_digest(state_.get()); }

  static Status WriteAll(int fd, const char* p, size_t n, uint64_t off, const std::string& name) {
    while (n > 0) {
      ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoStatus("write " + name, errno);
      p += w;
      n -= static_cast<size_t>(w);
      off += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }
  void set_offset(uint64_t off) { offset_ = off; }

 private:
  static constexpr size_t kBuf = 1 << 20;
  int fd_;
  std::string name_;
  struct FreeState {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, FreeState> state_{XXH3_createState()};
  std::string buf_;
  uint64_t offset_ = 0;
};

// Header bytes (struct + source_uri + prefix + padding), checksums unset.
std::string MakeHeader(const FileHeader& h, const std::string& source_uri,
                       const std::string& prefix) {
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out += source_uri;
  out += prefix;
  out.resize(h.header_size, '\0');
  return out;
}

struct Layout {
  std::vector<Record> records;
  uint64_t strings_size = 0;
  uint64_t files = 0, dirs = 0, total_bytes = 0;
};

Result<Layout> MakeRecords(const TreeBuilder& tree, const std::vector<uint32_t>& order,
                           const std::vector<ObjectInfo>& objects) {
  Layout l;
  l.records.resize(order.size());
  std::vector<uint32_t> ino_of(tree.node_count(), 0);
  for (size_t pos = 0; pos < order.size(); ++pos)
    ino_of[order[pos]] = static_cast<uint32_t>(pos + 1);
  uint64_t next_child = 2;  // breadth-first: children ranges follow in directory order
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const Node& n = tree.node(order[pos]);
    Record& r = l.records[pos];  // zeroed by resize; parent already set by its directory
    r.name_off = l.strings_size;
    r.name_len = static_cast<uint8_t>(n.name.size());
    l.strings_size += n.name.size();
    if (n.is_dir()) {
      r.flags = snapshot_format::kFlagDir;
      r.child_count = static_cast<uint32_t>(n.children.size());
      r.first_child = n.children.empty() ? 0 : static_cast<uint32_t>(next_child);
      next_child += n.children.size();
      for (uint32_t c : n.children)
        l.records[ino_of[c] - 1].parent = static_cast<uint32_t>(pos + 1);
      ++l.dirs;
    } else {
      const ObjectInfo& o = objects[n.object];
      r.size = o.size;
      r.mtime_ns = o.mtime_ns;
      r.etag_len = static_cast<uint16_t>(o.etag.size());
      l.total_bytes += o.size;
      ++l.files;
    }
  }
  l.records[0].parent = 1;
  // Etags follow all names, so siblings' names sit densely together for Lookup.
  for (Record& r : l.records) {
    r.etag_off = l.strings_size;
    l.strings_size += r.etag_len;
  }
  return l;
}

// Writes the whole file to fd.
Status WriteSnapshotFile(int fd, const std::string& name, const Layout& l, const TreeBuilder& tree,
                         const std::vector<uint32_t>& order, const std::vector<ObjectInfo>& objects,
                         const SnapshotOptions& options, const std::string& prefix,
                         uint64_t version, const SnapshotSkips& skips) {
  FileHeader h{};
  std::memcpy(h.magic, snapshot_format::kMagic, sizeof(h.magic));
  h.format_version = snapshot_format::kFormatVersion;
  h.header_size = static_cast<uint32_t>(
      (sizeof(FileHeader) + options.source_uri.size() + prefix.size() + 7) & ~size_t{7});
  h.snapshot_version = version;
  h.created_ns = Clock::Real()->WallNanos();
  h.entry_count = l.records.size();
  h.file_count = l.files;
  h.dir_count = l.dirs;
  h.total_bytes = l.total_bytes;
  h.records_offset = h.header_size;
  h.strings_offset = h.records_offset + l.records.size() * sizeof(Record);
  h.strings_size = l.strings_size;
  h.file_size = h.strings_offset + h.strings_size;
  h.skipped_invalid = skips.invalid_names;
  h.skipped_dir_markers = skips.dir_markers;
  h.skipped_conflicts = skips.file_dir_conflicts;
  h.source_uri_len = static_cast<uint32_t>(options.source_uri.size());
  h.prefix_len = static_cast<uint32_t>(prefix.size());
  h.record_size = sizeof(Record);

  ChecksumWriter w(fd, name);
  w.set_offset(h.header_size);
  RETURN_IF_ERROR(w.Append(l.records.data(), l.records.size() * sizeof(Record)));
  for (uint32_t id : order)
    RETURN_IF_ERROR(w.Append(tree.node(id).name.data(), tree.node(id).name.size()));
  for (uint32_t id : order) {
    const Node& n = tree.node(id);
    if (!n.is_dir())
      RETURN_IF_ERROR(w.Append(objects[n.object].etag.data(), objects[n.object].etag.size()));
  }
  RETURN_IF_ERROR(w.Flush());
  h.body_checksum = w.digest();
  std::string header = MakeHeader(h, options.source_uri, prefix);
  h.header_checksum = XXH3_64bits(header.data(), header.size());
  std::memcpy(header.data(), &h, sizeof(h));
  return ChecksumWriter::WriteAll(fd, header.data(), header.size(), 0, name);
}

// Classifies a relative path: 0 valid file, 1 invalid, 2 the prefix's own
// directory marker (nothing to add), 3 a directory marker below it ("a/b/").
int ClassifyRelative(std::string_view rel) {
  if (rel.empty()) return 2;
  const bool marker = rel.back() == '/';
  if (marker) rel.remove_suffix(1);
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    std::string_view c = rel.substr(start, end - start);
    if (c.empty() || c == "." || c == ".." || c.size() > snapshot_format::kMaxNameBytes ||
        c.find('\0') != std::string_view::npos) {
      return 1;
    }
    start = end + 1;
  }
  return marker ? 3 : 0;
}

std::string Printable(std::string_view s) {
  std::string out;
  for (char ch : s.substr(0, 200)) {
    auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

namespace snapshot_internal {

std::string NormalizePrefix(std::string_view prefix) {
  std::string p(prefix);
  if (!p.empty() && p.back() != '/') p += '/';
  return p;
}

Status ValidateOptions(const SnapshotOptions& options) {
  if (options.source_uri.empty()) return InvalidArgument("snapshot: source_uri is empty");
  if (options.list_parallelism < 1) {
    return InvalidArgument("snapshot " + options.source_uri + ": list_parallelism " +
                           std::to_string(options.list_parallelism) + " must be >= 1");
  }
  if (options.source_uri.size() > 65536 || options.prefix.size() > 65536) {
    return InvalidArgument("snapshot " + options.source_uri.substr(0, 200) +
                           ": source_uri or prefix too long");
  }
  return Status::Ok();
}

}  // namespace snapshot_internal

namespace {

// A temporary file next to `path`, opened for writing; unlinked on destruction
// unless Commit() renamed it into place.
class TempFile {
 public:
  static Result<std::unique_ptr<TempFile>> Create(const std::string& path) {
    static std::atomic<uint64_t> counter{0};
    auto t = std::unique_ptr<TempFile>(new TempFile);
    t->final_ = path;
    t->tmp_ =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    t->fd_ = ::open(t->tmp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, kCacheFileMode);
    if (t->fd_ < 0) return ErrnoStatus("create " + t->tmp_, errno);
    return t;
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& tmp_path() const { return tmp_; }

  // fsync, rename over the final path, fsync the directory.
  Status Commit() {
    if (::fsync(fd_) != 0) return ErrnoStatus("fsync " + tmp_, errno);
    if (::rename(tmp_.c_str(), final_.c_str()) != 0)
      return ErrnoStatus("rename " + tmp_ + " to " + final_, errno);
    committed_ = true;
    size_t slash = final_.rfind('/');
    std::string dir =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : final_.substr(0, slash));
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return ErrnoStatus("open directory " + dir, errno);
    int rc = ::fsync(dfd);
    int err = errno;
    ::close(dfd);
    if (rc != 0) return ErrnoStatus("fsync directory " + dir, err);
    return Status::Ok();
  }

 private:
  TempFile() = default;
  std::string final_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

Result<std::unique_ptr<Snapshot>> Snapshot::Build(UnderStorage& ufs, const SnapshotOptions& options,
                                                  const std::string& file_path, uint64_t version) {
  RETURN_IF_ERROR(snapshot_internal::ValidateOptions(options));
  std::string prefix = snapshot_internal::NormalizePrefix(options.prefix);
  auto listing = ufs.ListAll(prefix, options.list_parallelism);
  if (!listing.ok()) return listing.status().WithContext("snapshot of " + options.source_uri);
  return BuildFromEntries(std::move(*listing), options, file_path, version);
}

Result<std::unique_ptr<Snapshot>> Snapshot::BuildFromEntries(std::vector<ObjectInfo> objects,
                                                             const SnapshotOptions& options,
                                                             const std::string& file_path,
                                                             uint64_t version) {
  RETURN_IF_ERROR(snapshot_internal::ValidateOptions(options));
  const std::string prefix = snapshot_internal::NormalizePrefix(options.prefix);
  auto by_key = [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; };
  if (!std::is_sorted(objects.begin(), objects.end(), by_key))
    std::sort(objects.begin(), objects.end(), by_key);
  if (objects.size() >= snapshot_format::kMaxEntries) {
    return InvalidArgument("snapshot of " + options.source_uri + ": " +
                           std::to_string(objects.size()) + " objects exceed the format's limit");
  }
  SnapshotSkips skips;
  std::vector<std::string> examples;
  TreeBuilder tree(objects);
  for (size_t i = 0; i < objects.size(); ++i) {
    const std::string& key = objects[i].key;
    bool dup = i > 0 && objects[i - 1].key == key;
    int kind = (key.compare(0, prefix.size(), prefix) != 0 || dup ||
                objects[i].etag.size() > snapshot_format::kMaxEtagBytes)
                   ? 1
                   : ClassifyRelative(std::string_view(key).substr(prefix.size()));
    if (kind == 0) {
      tree.AddFile(static_cast<uint32_t>(i), std::string_view(key).substr(prefix.size()));
      continue;
    }
    if (kind == 3) {
      std::string_view rel = std::string_view(key).substr(prefix.size());
      rel.remove_suffix(1);
      tree.AddDir(rel);
      continue;
    }
    if (kind == 1) ++skips.invalid_names;
    if (kind == 2) ++skips.dir_markers;
    if (kind == 1 && examples.size() < 3) examples.push_back("'" + Printable(key) + "'");
  }
  skips.file_dir_conflicts = tree.SortAndResolve();
  if (skips.invalid_names > 0) {
    GLOG_WARN("snapshot of {}: skipped {} keys that are not valid relative paths, e.g. {}",
              options.source_uri, skips.invalid_names, fmt::join(examples, ", "));
  }
  if (skips.file_dir_conflicts > 0) {
    GLOG_WARN(
        "snapshot of {}: skipped {} files whose path is also a directory (the directory is kept)",
        options.source_uri, skips.file_dir_conflicts);
  }
  std::vector<uint32_t> order = tree.InodeOrder();
  ASSIGN_OR_RETURN(Layout layout, MakeRecords(tree, order, objects));

  ASSIGN_OR_RETURN(auto tmp, TempFile::Create(file_path));
  RETURN_IF_ERROR(WriteSnapshotFile(tmp->fd(), tmp->tmp_path(), layout, tree, order, objects,
                                    options, prefix, version, skips));
  if (::fsync(tmp->fd()) != 0) return ErrnoStatus("fsync " + tmp->tmp_path(), errno);
  ASSIGN_OR_RETURN(auto snap, FromFd(tmp->fd(), tmp->tmp_path()));
  RETURN_IF_ERROR(tmp->Commit());
  snap->file_path_ = file_path;
  GLOG_INFO("snapshot of {}: version {}, {} files, {} directories, {} bytes, file {} ({} bytes)",
            options.source_uri, version, snap->file_count(), snap->dir_count(), snap->total_bytes(),
            file_path, snap->file_size());
  return snap;
}

}  // namespace granary
