// On-disk layout of a snapshot file, format version 1 (docs/format-snapshot.md).
//
//   [FileHeader][source_uri][prefix][pad to 8]   header_size bytes
//   [Record × entry_count]                        at records_offset (= header_size)
//   [string table]                                at strings_offset, strings_size bytes
//
// All integers are little-endian (the structs are written as-is; Granary only
// builds on little-endian hosts, checked below). header_checksum is XXH3_64 of
// the header bytes with that field zeroed; body_checksum is XXH3_64 of every
// byte after the header. Records are in inode order (inode = index + 1),
// breadth-first, each directory's children contiguous and sorted by name bytes.
//
// Internal to src/meta. Thread safety: plain data.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace granary::snapshot_format {

static_assert(std::endian::native == std::endian::little, "snapshot files are little-endian");

inline constexpr char kMagic[8] = {'G', 'R', 'N', 'Y', 'S', 'N', 'A', 'P'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kMaxNameBytes = 255;          // one path component
inline constexpr uint32_t kMaxEtagBytes = 65535;        // fits Record::etag_len
inline constexpr uint64_t kMaxEntries = 0xFFFFFFFEull;  // inodes fit in uint32

// Record::flags bits.
inline constexpr uint8_t kFlagDir = 1;  // the entry is a directory
inline constexpr uint8_t kKnownFlags = kFlagDir;

struct FileHeader {
  char magic[8];                 // kMagic
  uint32_t format_version;       // kFormatVersion
  uint32_t header_size;          // this struct + source_uri + prefix, padded to 8
  uint64_t header_checksum;      // XXH3_64 of [0, header_size) with this field = 0
  uint64_t body_checksum;        // XXH3_64 of [header_size, file_size)
  uint64_t file_size;            // total bytes of the file
  uint64_t snapshot_version;     // 1, 2, ... (granary sync increments it)
  int64_t created_ns;            // wall clock at build, ns since the epoch
  uint64_t entry_count;          // records, directories (root included) and files
  uint64_t file_count;           // records without kFlagDir
  uint64_t dir_count;            // records with kFlagDir
  uint64_t total_bytes;          // sum of file sizes
  uint64_t records_offset;       // = header_size
  uint64_t strings_offset;       // = records_offset + entry_count * record_size
  uint64_t strings_size;         // = file_size - strings_offset
  uint64_t skipped_invalid;      // keys skipped: not a valid relative path
  uint64_t skipped_dir_markers;  // keys skipped: the prefix's own directory marker
  uint64_t skipped_conflicts;    // files skipped: a directory has the same path
  uint32_t source_uri_len;       // bytes right after this struct
  uint32_t prefix_len;           // bytes right after source_uri
  uint32_t record_size;          // sizeof(Record)
  uint32_t reserved;             // 0
};
static_assert(sizeof(FileHeader) == 152);
static_assert(offsetof(FileHeader, header_checksum) == 16 &&
              offsetof(FileHeader, snapshot_version) == 40 &&
              offsetof(FileHeader, skipped_invalid) == 112 &&
              offsetof(FileHeader, source_uri_len) == 136);

struct Record {
  uint64_t size;         // files: bytes; dirs: 0
  int64_t mtime_ns;      // files: ns since the epoch; dirs: 0
  uint64_t name_off;     // name bytes in the string table
  uint64_t etag_off;     // etag bytes in the string table
  uint32_t parent;       // parent inode; the root (inode 1) names itself
  uint32_t first_child;  // dirs with children: inode of the first child; else 0
  uint32_t child_count;  // dirs: number of children; files: 0
  uint8_t name_len;      // 1..255; 0 only for the root
  uint8_t flags;         // kFlag* bits
  uint16_t etag_len;     // files: etag bytes; dirs: 0
};
static_assert(sizeof(Record) == 48);
static_assert(offsetof(Record, parent) == 32);

}  // namespace granary::snapshot_format
