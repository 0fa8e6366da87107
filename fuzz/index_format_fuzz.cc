// libFuzzer target: arbitrary bytes into the store's index formats
// (store/index_format.h): the record decoders, the journal (ReplayJournal) and
// the checkpoint (ReadCheckpoint). Checks that nothing reads out of bounds or
// overflows (ASan, UBSan), that a huge count or length is refused before it is
// allocated (-rss_limit_mb), and that every record that decodes re-encodes to
// the same bytes (the encodings are canonical).
//
// Input: one mode byte, then the rest.
//   mode % 3 == 0: the rest is a journal file as is;
//   mode % 3 == 1: the rest is a checkpoint file as is;
//   mode % 3 == 2: the rest is a list of records, each (u8 type, u16 length,
//                  payload), that the harness frames with valid checks into a
//                  journal and a checkpoint, so mutations reach the decoders.
// Every mode also feeds the rest to the three decoders directly. Seeds
// (fuzz/corpus/index_format_fuzz) come from fuzz_seeds.cc. Built only with
// GRANARY_FUZZ=ON and clang; run by scripts/fuzz.sh.
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "store/index_format.h"

namespace {

using namespace granary::store_format;

std::string g_dir;  // holds this process's journal and checkpoint

void Check(bool ok) {
  if (!ok) std::abort();
}

// Every decoder on `payload`, whatever its record type says.
void Decode(RecordType, std::string_view payload) {
  if (auto e = DecodeEntry(payload); e.ok()) Check(EncodeEntry(*e) == payload);
  if (auto b = DecodeBlock(payload); b.ok()) Check(EncodeBlock(*b) == payload);
  uint64_t hi = 0, lo = 0;
  if (DecodeRemove(payload, hi, lo).ok()) Check(EncodeRemove(hi, lo) == payload);
}

void WriteFile(const std::string& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  Check(fd >= 0);
  Check(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

std::string Header(const char (&magic)[8]) {
  std::string h(magic, 8);
  const uint32_t version_and_reserved[2] = {kVersion, 0};
  h.append(reinterpret_cast<const char*>(version_and_reserved), 8);
  return h;
}

void ReplayAsJournal(std::string_view bytes) {
  WriteFile(g_dir + "/" + JournalFileName(0), bytes);
  auto n = ReplayJournal(g_dir + "/" + JournalFileName(0), Decode);
  Check(n.ok() || n.status().code() == granary::Code::kCorruption);
}

void ReadAsCheckpoint(std::string_view bytes) {
  WriteFile(g_dir + "/" + std::string(kCheckpointFileName), bytes);
  auto gen =
      ReadCheckpoint(g_dir, [](EntryRecord&& e) { Check(DecodeEntry(EncodeEntry(e)).ok()); });
  Check(gen.ok() || gen.status().code() == granary::Code::kCorruption);
}

// Frames (type, u16 length, payload) items of `in` into journal and checkpoint files.
void Framed(std::string_view in) {
  std::string journal = Header(kJournalMagic);
  std::string ckpt = Header(kCheckpointMagic);
  ckpt.append(16, '\x07');  // generation, wall time
  while (in.size() >= 3) {
    auto type = static_cast<RecordType>(static_cast<uint8_t>(in[0]));
    size_t len = static_cast<uint8_t>(in[1]) | (size_t{static_cast<uint8_t>(in[2])} << 8);
    in.remove_prefix(3);
    std::string_view payload = in.substr(0, len);
    in.remove_prefix(payload.size());
    std::string rec = FrameRecord(type, payload);
    journal += rec;
    ckpt += rec;
  }
  uint64_t sum = XXH3_64bits(ckpt.data(), ckpt.size());
  ckpt.append(reinterpret_cast<const char*>(&sum), 8);  // little-endian host
  ReplayAsJournal(journal);
  ReadAsCheckpoint(ckpt);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  g_dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/granary-index-fuzz-" +
          std::to_string(::getpid());
  std::filesystem::create_directories(g_dir);
  std::atexit([] { std::filesystem::remove_all(g_dir); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  Decode(RecordType::kEntry, rest);
  switch (data[0] % 3) {
    case 0: ReplayAsJournal(rest); break;
    case 1: ReadAsCheckpoint(rest); break;
    default: Framed(rest); break;
  }
  return 0;
}
