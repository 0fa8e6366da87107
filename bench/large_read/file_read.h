// Whole-file sequential reads through a file system (ext4, a FUSE mount), in
// one of three ways, each verifying the file's size and checksum.
//
// Thread safety: a FileReader belongs to one thread (it owns its buffer).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "large_read/run_report.h"

namespace granary::bench {

enum class IoMode {
  kRead,    // read(2) into one reused buffer
  kMmap,    // map the file, checksum straight from the mapping (as DALI reads)
  kDirect,  // O_DIRECT read(2) into a 4 KiB-aligned buffer
};

struct FileReadOptions {
  std::string root;               // entries' paths are relative to it
  size_t read_bytes = 256 << 10;  // bytes per read(2) / per step over a mapping
  IoMode io = IoMode::kRead;
};

// "" when the options can be used, else why not (O_DIRECT needs read_bytes a
// multiple of 4096).
std::string ValidateFileRead(const FileReadOptions& o);

// A FileWorker for RunParallel (the options are copied).
FileWorker MakeFileReader(const FileReadOptions& o);

const char* IoModeName(IoMode io);

}  // namespace granary::bench
