// Writes the binary seed corpora of snapshot_fuzz and index_format_fuzz with
// the real writers (Snapshot::BuildFromEntries, Journal, WriteCheckpoint), each
// file behind the harness's mode byte, plus a few damaged copies.
//
//   fuzz_seeds <repository root>/fuzz/corpus
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "meta/snapshot.h"
#include "store/index_format.h"

namespace fs = std::filesystem;
using namespace granary;

namespace {

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Seed(const fs::path& dir, const std::string& name, char mode, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << mode << bytes;
}

int Die(const Status& s) {
  std::fprintf(stderr, "fuzz_seeds: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds <fuzz/corpus directory>\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::off);
  const fs::path out = argv[1];
  const fs::path tmp =
      fs::temp_directory_path() / ("granary-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(tmp);

  // Snapshots: empty, one file, a small tree with skipped keys.
  std::vector<std::vector<ObjectInfo>> listings = {
      {},
      {{.key = "ds/a.txt", .size = 5, .mtime_ns = 1, .etag = "e1"}},
      {{.key = "ds/train/n01/x.jpg", .size = 100, .mtime_ns = 2, .etag = "\"abc\""},
       {.key = "ds/train/n01/y.jpg", .size = 200, .mtime_ns = 3, .etag = "def"},
       {.key = "ds/train/n02/z.jpg", .size = 0, .mtime_ns = 4, .etag = ""},
       {.key = "ds/val/a", .size = 7, .mtime_ns = 5, .etag = "v"},
       {.key = "ds/val/", .size = 0, .mtime_ns = 5, .etag = ""},
       {.key = "ds/bad//name", .size = 1, .mtime_ns = 5, .etag = ""},
       {.key = "ds/README", .size = 9, .mtime_ns = 6, .etag = "r"}},
  };
  const fs::path snap_dir = out / "snapshot_fuzz";
  for (size_t i = 0; i < listings.size(); ++i) {
    std::string path = (tmp / ("snap" + std::to_string(i))).string();
    SnapshotOptions opt{.source_uri = "s3://bucket/ds", .prefix = "ds"};
    auto s = Snapshot::BuildFromEntries(listings[i], opt, path, i + 1);
    if (!s.ok()) return Die(s.status());
    std::string bytes = ReadFile(path);
    Seed(snap_dir, "valid" + std::to_string(i), '\0', bytes);
    Seed(snap_dir, "valid" + std::to_string(i) + "_fixsum", '\1', bytes);
    if (i == 2) {
      Seed(snap_dir, "truncated", '\0', bytes.substr(0, bytes.size() / 2));
      std::string flipped = bytes;
      flipped[bytes.size() - 3] ^= 0x40;  // a string byte, checksums fixed by the harness
      Seed(snap_dir, "flipped_fixsum", '\1', flipped);
    }
  }

  // Index: a journal with every record type, a checkpoint of two entries.
  store_format::EntryRecord e{.id_hi = 1,
                              .id_lo = 2,
                              .dataset = "ds",
                              .key = "train/x.jpg",
                              .etag = "abc",
                              .size = 9 << 20,
                              .tier = 0,
                              .last_use = 42,
                              .checksums = {11, 0, 13},
                              .present = {0b101}};
  store_format::BlockRecord b{.object = e, .block = 1, .checksum = 12};
  b.object.checksums.clear();
  b.object.present.clear();
  const fs::path index_dir = out / "index_format_fuzz";
  {
    auto j = store_format::Journal::Create(tmp.string(), 0);
    if (!j.ok()) return Die(j.status());
    for (auto [type, payload] :
         {std::pair{store_format::RecordType::kEntry, store_format::EncodeEntry(e)},
          {store_format::RecordType::kBlock, store_format::EncodeBlock(b)},
          {store_format::RecordType::kRemove, store_format::EncodeRemove(1, 2)}}) {
      if (Status s = (*j)->Append(type, payload); !s.ok()) return Die(s);
    }
    std::string journal = ReadFile((*j)->path());
    Seed(index_dir, "journal", '\0', journal);
    Seed(index_dir, "journal_torn", '\0', journal.substr(0, journal.size() - 5));
    Seed(index_dir, "entry_payload", '\0', store_format::EncodeEntry(e));
    Seed(index_dir, "block_payload", '\0', store_format::EncodeBlock(b));
  }
  int left = 2;
  Status s =
      store_format::WriteCheckpoint(tmp.string(), 7, 123, [&](store_format::EntryRecord& out) {
        if (left-- == 0) return false;
        out = e;
        out.id_lo += left;
        return true;
      });
  if (!s.ok()) return Die(s);
  std::string ckpt = ReadFile(tmp / std::string(store_format::kCheckpointFileName));
  Seed(index_dir, "checkpoint", '\1', ckpt);
  std::string bad_sum = ckpt;
  bad_sum[bad_sum.size() - 1] ^= 1;
  Seed(index_dir, "checkpoint_bad_sum", '\1', bad_sum);
  // Mode 2: (type, u16 length, payload) items the harness frames.
  auto item = [](store_format::RecordType t, const std::string& p) {
    return std::string(1, static_cast<char>(t)) + static_cast<char>(p.size() & 0xff) +
           static_cast<char>(p.size() >> 8) + p;
  };
  Seed(index_dir, "framed", '\2',
       item(store_format::RecordType::kEntry, store_format::EncodeEntry(e)) +
           item(store_format::RecordType::kBlock, store_format::EncodeBlock(b)) +
           item(store_format::RecordType::kRemove, store_format::EncodeRemove(3, 4)));
  fs::remove_all(tmp);
  return 0;
}
