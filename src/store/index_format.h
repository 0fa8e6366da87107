// On-disk formats of the store's index: the journal and the checkpoint
// (documented in docs/format-store.md; change both together and bump the
// version).
//
// Both files are sequences of framed records:
//   u32 payload_length | u32 check | u8 type | payload
// where check is the low 32 bits of XXH3-64 over (type byte, payload). All
// integers are little-endian. A journal is replayed up to its first torn or
// corrupt record; a checkpoint must be intact as a whole (trailing XXH3-64 of
// every byte before it) or it is ignored.
//
// Thread safety: Journal is not thread-safe (the store serializes appends);
// the free functions are pure or touch only their own files.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "granary/status.h"

namespace granary::store_format {

inline constexpr uint32_t kVersion = 1;
inline constexpr char kJournalMagic[8] = {'G', 'R', 'N', 'J', 'R', 'N', 'L', '1'};
inline constexpr char kCheckpointMagic[8] = {'G', 'R', 'N', 'C', 'K', 'P', 'T', '1'};
inline constexpr size_t kFileHeaderSize = 16;   // magic, u32 version, u32 reserved
inline constexpr size_t kRecordHeaderSize = 9;  // u32 length, u32 check, u8 type
inline constexpr uint32_t kMaxRecordPayload = 64u << 20;

// Record types.
enum class RecordType : uint8_t {
  kEntry = 1,   // upsert of a whole index entry (admission of a small object, demotion)
  kRemove = 2,  // the entry with this id is gone
  kBlock = 3,   // upsert of one present block of an object (creates the entry if needed)
};

// The persistent part of one index entry.
struct EntryRecord {
  uint64_t id_hi = 0, id_lo = 0;  // XXH3-128 of (dataset, key, etag)
  std::string dataset, key, etag;
  uint64_t size = 0;
  uint32_t tier = 0;
  uint64_t last_use = 0;
  std::vector<uint64_t> checksums;  // one per block (XXH3-64); 0 where absent
  std::vector<uint64_t> present;    // presence bitmap, ceil(blocks / 64) words
};

// One block of an object (kBlock).
struct BlockRecord {
  EntryRecord object;  // identity, size, tier, last_use; checksums/present unused
  uint64_t block = 0;
  uint64_t checksum = 0;
};

std::string EncodeEntry(const EntryRecord& e);
std::string EncodeRemove(uint64_t id_hi, uint64_t id_lo);
std::string EncodeBlock(const BlockRecord& b);
Result<EntryRecord> DecodeEntry(std::string_view payload);
Status DecodeRemove(std::string_view payload, uint64_t& id_hi, uint64_t& id_lo);
Result<BlockRecord> DecodeBlock(std::string_view payload);

// Frames a record: header + payload.
std::string FrameRecord(RecordType type, std::string_view payload);

// "journal-<generation as 16 hex digits>".
std::string JournalFileName(uint64_t generation);
inline constexpr std::string_view kCheckpointFileName = "index.ckpt";

// An append-only journal file.
class Journal {
 public:
  // Creates (truncating) dir/JournalFileName(generation) with its header, fsyncs it.
  static Result<std::unique_ptr<Journal>> Create(const std::string& dir, uint64_t generation);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends one framed record with write(2) (no fsync: the kernel keeps it
  // across a process kill). On failure the file is cut back to the last whole
  // record, so later appends stay replayable; NoSpace on ENOSPC/EDQUOT.
  Status Append(RecordType type, std::string_view payload);
  Status Sync();
  uint64_t generation() const { return generation_; }
  uint64_t records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  Journal(int fd, std::string path, uint64_t generation, uint64_t offset);
  int fd_;
  std::string path_;
  uint64_t generation_;
  uint64_t offset_;  // end of the last whole record
  uint64_t records_ = 0;
};

// Calls fn for each intact record of the journal at `path`, stopping at the
// first torn or corrupt one. Returns the number of records replayed;
// Corruption if the header is wrong, NotFound if the file is missing.
Result<uint64_t> ReplayJournal(const std::string& path,
                               const std::function<void(RecordType, std::string_view)>& fn);

// Writes a checkpoint crash-safely (temp file, fsync, rename, fsync dir).
// `next_entry` is called until it returns false; each call fills one entry.
// `generation` = the first journal generation NOT covered by this checkpoint.
Status WriteCheckpoint(const std::string& dir, uint64_t generation, int64_t wall_nanos,
                       const std::function<bool(EntryRecord&)>& next_entry);

// Reads dir/index.ckpt: calls fn per entry and returns its generation.
// NotFound if absent, Corruption if any check fails (fn may then have seen
// some entries; the caller discards them).
Result<uint64_t> ReadCheckpoint(const std::string& dir,
                                const std::function<void(EntryRecord&&)>& fn);

}  // namespace granary::store_format
