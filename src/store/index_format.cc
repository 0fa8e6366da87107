// Encoding, journal and checkpoint files of the store's index (see index_format.h).
#include "store/index_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/file_modes.h"

namespace granary::store_format {
namespace {

void PutU32(std::string& out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out.append(b, 4);
}
void PutU64(std::string& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out.append(b, 8);
}
void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

uint32_t LoadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
uint64_t LoadU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Bounds-checked little-endian reader over one payload.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U32(uint32_t& v) {
    if (in_.size() < 4) return false;
    v = LoadU32(in_.data());
    in_.remove_prefix(4);
    return true;
  }
  bool U64(uint64_t& v) {
    if (in_.size() < 8) return false;
    v = LoadU64(in_.data());
    in_.remove_prefix(8);
    return true;
  }
  bool String(std::string& s) {
    uint32_t n = 0;
    if (!U32(n) || in_.size() < n) return false;
    s.assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool U64s(std::vector<uint64_t>& v) {
    uint32_t n = 0;
    if (!U32(n) || in_.size() / 8 < n) return false;
    v.resize(n);
    for (auto& x : v) U64(x);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

void PutIdentity(std::string& out, const EntryRecord& e) {
  PutU64(out, e.id_hi);
  PutU64(out, e.id_lo);
  PutString(out, e.dataset);
  PutString(out, e.key);
  PutString(out, e.etag);
  PutU64(out, e.size);
  PutU32(out, e.tier);
  PutU64(out, e.last_use);
}

bool GetIdentity(Reader& r, EntryRecord& e) {
  return r.U64(e.id_hi) && r.U64(e.id_lo) && r.String(e.dataset) && r.String(e.key) &&
         r.String(e.etag) && r.U64(e.size) && r.U32(e.tier) && r.U64(e.last_use);
}

// The check of a record: over its type byte and payload, which are adjacent
// in every framed record (`type_and_payload`).
uint32_t RecordCheck(std::string_view type_and_payload) {
  return static_cast<uint32_t>(XXH3_64bits(type_and_payload.data(), type_and_payload.size()));
}

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(what, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Result<std::string> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus(path, errno);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string FileHeader(const char (&magic)[8]) {
  std::string h(magic, 8);
  PutU32(h, kVersion);
  PutU32(h, 0);
  return h;
}

Status CheckHeader(std::string_view data, const char (&magic)[8], const std::string& path) {
  if (data.size() < kFileHeaderSize || std::memcmp(data.data(), magic, 8) != 0) {
    return Corruption(path + ": bad magic or truncated header");
  }
  uint32_t version = LoadU32(data.data() + 8);
  if (version != kVersion) {
    return Corruption(path + ": unsupported version " + std::to_string(version));
  }
  return Status::Ok();
}

// Parses one framed record at the front of `data`; false if torn or corrupt.
bool NextRecord(std::string_view& data, RecordType& type, std::string_view& payload) {
  if (data.size() < kRecordHeaderSize) return false;
  uint32_t len = LoadU32(data.data());
  uint32_t check = LoadU32(data.data() + 4);
  if (len > kMaxRecordPayload || data.size() - kRecordHeaderSize < len) return false;
  type = static_cast<RecordType>(static_cast<uint8_t>(data[8]));
  payload = data.substr(kRecordHeaderSize, len);
  if (RecordCheck(data.substr(8, 1 + len)) != check) return false;
  data.remove_prefix(kRecordHeaderSize + len);
  return true;
}

}  // namespace

std::string EncodeEntry(const EntryRecord& e) {
  std::string out;
  PutIdentity(out, e);
  PutU32(out, static_cast<uint32_t>(e.checksums.size()));
  for (uint64_t c : e.checksums) PutU64(out, c);
  PutU32(out, static_cast<uint32_t>(e.present.size()));
  for (uint64_t w : e.present) PutU64(out, w);
  return out;
}

std::string EncodeRemove(uint64_t id_hi, uint64_t id_lo) {
  std::string out;
  PutU64(out, id_hi);
  PutU64(out, id_lo);
  return out;
}

std::string EncodeBlock(const BlockRecord& b) {
  std::string out;
  PutIdentity(out, b.object);
  PutU64(out, b.block);
  PutU64(out, b.checksum);
  return out;
}

Result<EntryRecord> DecodeEntry(std::string_view payload) {
  Reader r(payload);
  EntryRecord e;
  if (!GetIdentity(r, e) || !r.U64s(e.checksums) || !r.U64s(e.present) || !r.done()) {
    return Corruption("index entry record: malformed payload");
  }
  return e;
}

Status DecodeRemove(std::string_view payload, uint64_t& id_hi, uint64_t& id_lo) {
  Reader r(payload);
  if (!r.U64(id_hi) || !r.U64(id_lo) || !r.done()) {
    return Corruption("index remove record: malformed payload");
  }
  return Status::Ok();
}

Result<BlockRecord> DecodeBlock(std::string_view payload) {
  Reader r(payload);
  BlockRecord b;
  if (!GetIdentity(r, b.object) || !r.U64(b.block) || !r.U64(b.checksum) || !r.done()) {
    return Corruption("index block record: malformed payload");
  }
  return b;
}

std::string FrameRecord(RecordType type, std::string_view payload) {
  std::string out;
  out.reserve(kRecordHeaderSize + payload.size());
  PutU32(out, static_cast<uint32_t>(payload.size()));
  PutU32(out, 0);
  out.push_back(static_cast<char>(type));
  out.append(payload);
  uint32_t check = RecordCheck(std::string_view(out).substr(8));
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<char>(check >> (8 * i));
  return out;
}

std::string JournalFileName(uint64_t generation) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "journal-%016llx", static_cast<unsigned long long>(generation));
  return buf;
}

Journal::Journal(int fd, std::string path, uint64_t generation, uint64_t offset)
    : fd_(fd), path_(std::move(path)), generation_(generation), offset_(offset) {}

Journal::~Journal() { ::close(fd_); }

Result<std::unique_ptr<Journal>> Journal::Create(const std::string& dir, uint64_t generation) {
  std::string path = dir + "/" + JournalFileName(generation);
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, kCacheFileMode);
  if (fd < 0) return ErrnoStatus("create journal " + path, errno);
  std::string header = FileHeader(kJournalMagic);
  Status s = WriteAll(fd, header, "write journal header " + path);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus("fsync journal " + path, errno);
  if (!s.ok()) {
    ::close(fd);
    ::unlink(path.c_str());
    return s;
  }
  return std::unique_ptr<Journal>(new Journal(fd, path, generation, header.size()));
}

Status Journal::Append(RecordType type, std::string_view payload) {
  std::string rec = FrameRecord(type, payload);
  Status s = WriteAll(fd_, rec, "append to journal " + path_);
  if (!s.ok()) {
    // Cut the torn tail so later records stay reachable by replay.
    if (::ftruncate(fd_, static_cast<off_t>(offset_)) != 0 ||
        ::lseek(fd_, static_cast<off_t>(offset_), SEEK_SET) < 0) {
      return Internal("journal " + path_ + ": cannot cut a torn record: " + std::strerror(errno));
    }
    return s;
  }
  offset_ += rec.size();
  ++records_;
  return Status::Ok();
}

Status Journal::Sync() {
  if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync journal " + path_, errno);
  return Status::Ok();
}

Result<uint64_t> ReplayJournal(const std::string& path,
                               const std::function<void(RecordType, std::string_view)>& fn) {
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path));
  RETURN_IF_ERROR(CheckHeader(data, kJournalMagic, path));
  std::string_view rest(data);
  rest.remove_prefix(kFileHeaderSize);
  uint64_t count = 0;
  RecordType type;
  std::string_view payload;
  while (NextRecord(rest, type, payload)) {
    fn(type, payload);
    ++count;
  }
  return count;
}

namespace {

// Buffered checkpoint writer with a running XXH3-64 over every byte.
class CheckpointWriter {
 public:
  CheckpointWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
    st_ = XXH3_createState();
    XXH3_64bits_reset(st_);
  }
  ~CheckpointWriter() { XXH3_freeState(st_); }
  Status Add(std::string_view bytes) {
    XXH3_64bits_update(st_, bytes.data(), bytes.size());
    buf_.append(bytes);
    if (buf_.size() >= (1u << 20)) return Flush();
    return Status::Ok();
  }
  Status Finish() {
    std::string tail;
    PutU64(tail, XXH3_64bits_digest(st_));
    buf_.append(tail);
    return Flush();
  }

 private:
  Status Flush() {
    Status s = WriteAll(fd_, buf_, "write checkpoint " + path_);
    buf_.clear();
    return s;
  }
  int fd_;
  std::string path_;
  std::string buf_;
  XXH3_state_t* st_;
};

Status WriteCheckpointBody(int fd, const std::string& path, uint64_t generation, int64_t wall_nanos,
                           const std::function<bool(EntryRecord&)>& next_entry) {
  CheckpointWriter w(fd, path);
  std::string head = FileHeader(kCheckpointMagic);
  PutU64(head, generation);
  PutU64(head, static_cast<uint64_t>(wall_nanos));
  RETURN_IF_ERROR(w.Add(head));
  EntryRecord e;
  while (next_entry(e)) {
    RETURN_IF_ERROR(w.Add(FrameRecord(RecordType::kEntry, EncodeEntry(e))));
    e = EntryRecord{};
  }
  return w.Finish();
}

}  // namespace

Status WriteCheckpoint(const std::string& dir, uint64_t generation, int64_t wall_nanos,
                       const std::function<bool(EntryRecord&)>& next_entry) {
  std::string path = dir + "/" + std::string(kCheckpointFileName);
  std::string tmp = path + ".tmp";
  int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, kCacheFileMode);
  if (fd < 0) return ErrnoStatus("create checkpoint " + tmp, errno);
  ::fchmod(fd, kCacheFileMode);  // a temp file left by an older version may be wider
  Status s = WriteCheckpointBody(fd, tmp, generation, wall_nanos, next_entry);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus("fsync checkpoint " + tmp, errno);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus("rename checkpoint " + tmp, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Result<uint64_t> ReadCheckpoint(const std::string& dir,
                                const std::function<void(EntryRecord&&)>& fn) {
  std::string path = dir + "/" + std::string(kCheckpointFileName);
  ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path));
  RETURN_IF_ERROR(CheckHeader(data, kCheckpointMagic, path));
  if (data.size() < kFileHeaderSize + 16 + 8) return Corruption(path + ": truncated");
  uint64_t want = LoadU64(data.data() + data.size() - 8);
  if (XXH3_64bits(data.data(), data.size() - 8) != want) {
    return Corruption(path + ": checksum mismatch");
  }
  uint64_t generation = LoadU64(data.data() + kFileHeaderSize);
  std::string_view rest(data);
  rest.remove_prefix(kFileHeaderSize + 16);
  rest.remove_suffix(8);
  RecordType type;
  std::string_view payload;
  while (!rest.empty()) {
    if (!NextRecord(rest, type, payload) || type != RecordType::kEntry) {
      return Corruption(path + ": malformed record");
    }
    ASSIGN_OR_RETURN(EntryRecord e, DecodeEntry(payload));
    fn(std::move(e));
  }
  return generation;
}

}  // namespace granary::store_format
