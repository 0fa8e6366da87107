// The data set of the large-object benchmark: deterministic file contents and
// the manifest that records each file's size and checksum.
//
// A file's bytes are a splitmix64 stream keyed by (seed, path): word i (8
// bytes, little-endian) is Mix(key + (i + 1) * golden), so any range can be
// produced without the bytes before it and two files never share content.
// The checksum is XXH3-64 of the whole file, written as 16 hex digits.
//
// Thread safety: the functions are pure or touch only the files they name;
// a StreamChecksum belongs to one thread.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace granary::bench {

// One file of the data set; `path` is relative to the data set's root (or
// to the bucket prefix).
struct ManifestEntry {
  std::string path;
  uint64_t bytes = 0;
  std::string xxh3;  // 16 lower-case hex digits
};

struct Manifest {
  uint64_t seed = 1;
  std::vector<ManifestEntry> files;
};

// XXH3-64 over bytes fed in order.
class StreamChecksum {
 public:
  StreamChecksum();
  ~StreamChecksum();
  StreamChecksum(const StreamChecksum&) = delete;
  StreamChecksum& operator=(const StreamChecksum&) = delete;

  void Update(const void* data, size_t n);
  std::string Hex() const;  // of everything fed so far

 private:
  XXH3_state_t* state_;
};

// The key of the stream of `path` in a data set made with `seed`.
uint64_t PatternKey(uint64_t seed, std::string_view path);

// Writes the pattern bytes [offset, offset + out.size()) of the stream `key`
// into out. offset must be a multiple of 8.
void FillPattern(uint64_t key, uint64_t offset, std::span<char> out);

// Creates (or replaces) root/path with `bytes` pattern bytes, creating parent
// directories; returns the entry, or an error message in `error`.
ManifestEntry GenerateFile(const std::string& root, const std::string& path, uint64_t bytes,
                           uint64_t seed, std::string* error);

// Reads a manifest written by ManifestToJson; false with a message in error.
bool LoadManifest(const std::string& file, Manifest* out, std::string* error);
std::string ManifestToJson(const Manifest& m);

// The entries whose path starts with prefix ("" = all), in manifest order.
std::vector<ManifestEntry> Select(const Manifest& m, std::string_view prefix);

}  // namespace granary::bench
