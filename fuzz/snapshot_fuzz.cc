// libFuzzer target: arbitrary bytes as a snapshot file
// (Snapshot::Load: header, layout, checksums, record bounds, tree shape), then
// every query on a file that loads. Checks that the structural checks reject
// what the queries could not survive: nothing reads out of bounds or
// overflows (ASan, UBSan), Path terminates, and every entry is found again by
// Lookup in its parent.
//
// Input: one mode byte, then the file. Mode bit 0 set: the harness first
// rewrites both checksums to match, so mutations reach the structural checks
// instead of stopping at a checksum mismatch. Seeds (fuzz/corpus/snapshot_fuzz)
// come from fuzz_seeds.cc. Built only with GRANARY_FUZZ=ON and clang; run by
// scripts/fuzz.sh.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "meta/snapshot.h"
#include "meta/snapshot_format.h"

namespace {

using granary::snapshot_format::FileHeader;

std::string g_path;  // the file each input is written to

void Check(bool ok) {
  if (!ok) std::abort();
}

// Makes header_checksum and body_checksum match the bytes, where the header's
// size field allows it.
void FixChecksums(std::string& file) {
  if (file.size() < sizeof(FileHeader)) return;
  FileHeader h;
  std::memcpy(&h, file.data(), sizeof(h));
  if (h.header_size < sizeof(FileHeader) || h.header_size > file.size()) return;
  h.body_checksum = XXH3_64bits(file.data() + h.header_size, file.size() - h.header_size);
  h.header_checksum = 0;
  std::memcpy(file.data(), &h, sizeof(h));
  h.header_checksum = XXH3_64bits(file.data(), h.header_size);
  std::memcpy(file.data() + offsetof(FileHeader, header_checksum), &h.header_checksum, 8);
}

void WriteFile(const std::string& bytes) {
  int fd = ::open(g_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  Check(fd >= 0);
  Check(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

void Query(const granary::Snapshot& s) {
  const uint64_t n = std::min<uint64_t>(s.max_ino(), 4096);
  for (uint64_t ino = 1; ino <= n; ++ino) {
    auto e = s.Get(ino);
    Check(e.has_value() && e->ino == ino);
    (void)s.Key(ino);
    if (ino != 1) Check(s.Lookup(e->parent, e->name) == ino);
    if (e->is_dir) {
      auto children = s.ReadDir(ino, 0, 64);
      Check(children.size() == std::min<uint64_t>(64, e->child_count));
      for (const auto& c : children) Check(c.parent == ino);
    }
  }
  Check(!s.Get(0) && !s.Get(s.max_ino() + 1));
  Check(s.FindPath("") == 1u);
  (void)s.FindPath(s.Path(n));
  uint64_t files = 0;
  s.ForEachFile([&](const granary::EntryView&) { ++files; });
  Check(files == s.file_count());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  const char* tmp = std::getenv("TMPDIR");
  g_path = std::string(tmp != nullptr ? tmp : "/tmp") + "/granary-snapshot-fuzz-" +
           std::to_string(::getpid());
  std::atexit([] { ::unlink(g_path.c_str()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) != 0) FixChecksums(file);
  WriteFile(file);
  auto snap = granary::Snapshot::Load(g_path);
  if (snap.ok()) {
    Query(**snap);
  } else {
    Check(snap.status().code() == granary::Code::kCorruption);
  }
  return 0;
}
