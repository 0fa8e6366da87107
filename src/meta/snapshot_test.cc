// Tests of the dataset snapshot: a reference-model property test over random
// trees, inode stability, Rebuild, corruption handling, bad keys, scale.
#include "meta/snapshot.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "meta/snapshot_format.h"
#include "testing/mem_ufs.h"
#include "testing/temp_dir.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// The reference model: files by relative path, and each directory's children.
struct Model {
  std::map<std::string, ObjectInfo> files;                // relative path -> object
  std::map<std::string, std::set<std::string>> children;  // dir path ("" root) -> names
};

std::string RandomName(std::mt19937& rng) {
  static const std::vector<std::string> kPieces = {
      "a", "b", "Z",    "0", "9",   " ", "-", "_",
      ".", "é", "日本", "ß", "x y", "~", "+", "\xf0\x9f\x90\x88"};
  std::string name;
  int len = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < len; ++i) name += kPieces[rng() % kPieces.size()];
  if (name == "." || name == "..") name += "n";
  return name;
}

// Fills ufs with a random tree under "ds/" (plus noise outside it) and returns
// what the snapshot must contain.
Model MakeRandomTree(testing::MemUfs& ufs, uint32_t seed, int objects) {
  std::mt19937 rng(seed);
  std::vector<std::string> dirs = {""};
  std::map<std::string, ObjectInfo> candidates;
  for (int i = 0; i < objects; ++i) {
    std::string dir = dirs[rng() % dirs.size()];
    if (rng() % 3 == 0) {  // go one level deeper
      dir = dir.empty() ? RandomName(rng) : dir + "/" + RandomName(rng);
      dirs.push_back(dir);
    }
    std::string rel = dir.empty() ? RandomName(rng) : dir + "/" + RandomName(rng);
    auto mtime = static_cast<int64_t>(1'600'000'000'000'000'000 + rng() % 1'000'000'000);
    ufs.Put("ds/" + rel, std::string(rng() % 50, 'x'), mtime);
    candidates[rel] = ObjectInfo{};
  }
  ufs.Put("ds_sibling/x", "not in the dataset");
  ufs.Put("other/y", "not in the dataset");
  Model m;
  m.children[""];
  std::set<std::string> dir_paths;
  for (const auto& [rel, unused] : candidates) {
    for (size_t p = rel.find('/'); p != std::string::npos; p = rel.find('/', p + 1)) {
      dir_paths.insert(rel.substr(0, p));
    }
  }
  for (const auto& d : dir_paths) m.children[d];
  auto add_child = [&](const std::string& path) {
    size_t slash = path.rfind('/');
    std::string parent = slash == std::string::npos ? "" : path.substr(0, slash);
    m.children[parent].insert(path.substr(slash == std::string::npos ? 0 : slash + 1));
  };
  for (const auto& d : dir_paths) add_child(d);
  for (const auto& [rel, unused] : candidates) {
    if (dir_paths.count(rel)) continue;  // a directory has this path: the file is skipped
    auto info = ufs.Stat("ds/" + rel);
    m.files[rel] = *info;
    add_child(rel);
  }
  return m;
}

uint64_t ConflictCount(const Model& m, testing::MemUfs& ufs) {
  uint64_t n = 0;
  for (const auto& [dir, unused] : m.children) {
    if (!dir.empty() && ufs.Stat("ds/" + dir).ok()) ++n;
  }
  return n;
}

void CheckAgainstModel(const Snapshot& s, const Model& m) {
  ASSERT_EQ(s.file_count(), m.files.size());
  ASSERT_EQ(s.dir_count(), m.children.size());
  ASSERT_EQ(s.max_ino(), m.files.size() + m.children.size());
  uint64_t total = 0;
  for (const auto& [rel, info] : m.files) {
    auto ino = s.FindPath(rel);
    ASSERT_TRUE(ino.has_value()) << rel;
    uint64_t walked = 1;
    for (size_t start = 0; start <= rel.size();) {
      size_t end = std::min(rel.find('/', start), rel.size());
      auto next = s.Lookup(walked, std::string_view(rel).substr(start, end - start));
      ASSERT_TRUE(next.has_value()) << rel;
      walked = *next;
      start = end + 1;
    }
    EXPECT_EQ(walked, *ino) << rel;
    auto e = s.Get(*ino);
    ASSERT_TRUE(e.has_value());
    EXPECT_FALSE(e->is_dir) << rel;
    EXPECT_EQ(e->size, info.size) << rel;
    EXPECT_EQ(e->mtime_ns, info.mtime_ns) << rel;
    EXPECT_EQ(e->etag, info.etag) << rel;
    EXPECT_EQ(s.Path(*ino), rel);
    EXPECT_EQ(s.Key(*ino), "ds/" + rel);
    EXPECT_FALSE(s.Lookup(*ino, "anything").has_value());
    total += info.size;
  }
  EXPECT_EQ(s.total_bytes(), total);
  for (const auto& [dir, names] : m.children) {
    auto ino = s.FindPath(dir);
    ASSERT_TRUE(ino.has_value()) << dir;
    auto e = s.Get(*ino);
    ASSERT_TRUE(e->is_dir) << dir;
    EXPECT_EQ(e->child_count, names.size());
    EXPECT_EQ(s.Path(*ino), dir);
    for (size_t page : {1u, 3u, 1000u}) {
      std::vector<std::string> got;
      for (uint64_t off = 0;; off += page) {
        auto part = s.ReadDir(*ino, off, page);
        if (part.empty()) break;
        ASSERT_LE(part.size(), page);
        for (const auto& c : part) {
          EXPECT_EQ(c.parent, *ino);
          got.emplace_back(c.name);
        }
      }
      EXPECT_EQ(got, std::vector<std::string>(names.begin(), names.end())) << "dir '" << dir << "'";
    }
    EXPECT_FALSE(s.Lookup(*ino, "no such name").has_value());
  }
  uint64_t visited = 0;
  s.ForEachFile([&](const EntryView& e) {
    ++visited;
    EXPECT_TRUE(m.files.count(s.Path(e.ino))) << s.Path(e.ino);
  });
  EXPECT_EQ(visited, m.files.size());
  EXPECT_FALSE(s.Get(0).has_value());
  EXPECT_FALSE(s.Get(s.max_ino() + 1).has_value());
  EXPECT_EQ(s.Get(1)->parent, 1u);
}

SnapshotOptions DsOptions() {
  return SnapshotOptions{.source_uri = "mem://test/ds", .prefix = "ds"};
}

TEST(Snapshot, RandomTreesMatchReferenceModelAfterBuildAndLoad) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    TempDir dir;
    testing::MemUfs ufs;
    Model m = MakeRandomTree(ufs, seed, 40 + static_cast<int>(seed) * 25);
    auto built = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    CheckAgainstModel(**built, m);
    EXPECT_EQ((*built)->skipped().file_dir_conflicts, ConflictCount(m, ufs));
    auto loaded = Snapshot::Load(dir.File("snap"));
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    CheckAgainstModel(**loaded, m);
    EXPECT_EQ((*loaded)->version(), 1u);
    EXPECT_EQ((*loaded)->source_uri(), "mem://test/ds");
    EXPECT_EQ((*loaded)->prefix(), "ds/");
  }
}

TEST(Snapshot, InodesAreStableAcrossLoadsOfTheSameFile) {
  TempDir dir;
  testing::MemUfs ufs;
  Model m = MakeRandomTree(ufs, 77, 300);
  auto built = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
  ASSERT_TRUE(built.ok());
  auto a = Snapshot::Load(dir.File("snap"));
  auto b = Snapshot::Load(dir.File("snap"));
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& [rel, unused] : m.files) {
    EXPECT_EQ((*a)->FindPath(rel), (*built)->FindPath(rel));
    EXPECT_EQ((*a)->FindPath(rel), (*b)->FindPath(rel));
  }
}

TEST(Snapshot, RebuildMakesNextVersionAndOldObjectStaysValid) {
  TempDir dir;
  testing::MemUfs ufs;
  ufs.Put("ds/train/a.jpg", "aaaa");
  ufs.Put("ds/train/b.jpg", "bb");
  auto v1 = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
  ASSERT_TRUE(v1.ok());
  auto a_ino = (*v1)->FindPath("train/a.jpg");
  ASSERT_TRUE(a_ino.has_value());
  std::string_view a_name = (*v1)->Get(*a_ino)->name;  // points into v1's mapping

  ufs.Put("ds/train/c.jpg", "c");
  ufs.Remove("ds/train/a.jpg");
  auto v2 = Snapshot::Rebuild(ufs, **v1, dir.File("snap"));
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ((*v2)->version(), 2u);
  EXPECT_TRUE((*v2)->FindPath("train/c.jpg").has_value());
  EXPECT_FALSE((*v2)->FindPath("train/a.jpg").has_value());

  EXPECT_EQ((*v1)->version(), 1u);
  EXPECT_EQ(a_name, "a.jpg");
  EXPECT_EQ((*v1)->Get(*a_ino)->size, 4u);
  EXPECT_FALSE((*v1)->FindPath("train/c.jpg").has_value());

  auto reloaded = Snapshot::Load(dir.File("snap"));
  ASSERT_TRUE(reloaded.ok());
  EXPECT_EQ((*reloaded)->version(), 2u);
  EXPECT_EQ((*reloaded)->file_count(), 2u);
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(dir.File("snap")).parent_path()),
                          fs::directory_iterator{}),
            1)
      << "temp files left behind";
}

// Damages the file at `path` in place.
void Truncate(const std::string& path, uint64_t size) { fs::resize_file(path, size); }
void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(Snapshot, CorruptFilesAreDetectedAndRebuiltFromTheOrigin) {
  testing::MemUfs ufs;
  Model m = MakeRandomTree(ufs, 5, 200);
  struct Damage {
    std::string name;
    std::function<void(const std::string&, uint64_t)> apply;
    std::string expect;  // in the message
  };
  std::vector<Damage> damages = {
      {"empty", [](auto& p, uint64_t) { Truncate(p, 0); }, "truncated"},
      {"short header", [](auto& p, uint64_t) { Truncate(p, 100); }, "truncated"},
      {"half", [](auto& p, uint64_t n) { Truncate(p, n / 2); }, "truncated"},
      {"last byte cut", [](auto& p, uint64_t n) { Truncate(p, n - 1); }, "truncated"},
      {"trailing bytes", [](auto& p, uint64_t n) { Truncate(p, n + 10); }, "trailing"},
      {"magic", [](auto& p, uint64_t) { FlipByte(p, 0); }, "magic"},
      {"header field", [](auto& p, uint64_t) { FlipByte(p, 40); }, "header checksum"},
      {"record byte", [](auto& p, uint64_t n) { FlipByte(p, 300); }, "body checksum"},
      {"string byte", [](auto& p, uint64_t n) { FlipByte(p, n - 3); }, "body checksum"},
  };
  for (const auto& d : damages) {
    SCOPED_TRACE(d.name);
    TempDir dir;
    std::string path = dir.File("snap");
    auto built = Snapshot::Build(ufs, DsOptions(), path, 7);
    ASSERT_TRUE(built.ok());
    uint64_t size = (*built)->file_size();
    built->reset();
    d.apply(path, size);
    auto loaded = Snapshot::Load(path);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), Code::kCorruption) << loaded.status().ToString();
    EXPECT_NE(loaded.status().message().find(path), std::string::npos)
        << loaded.status().ToString();
    EXPECT_NE(loaded.status().message().find(d.expect), std::string::npos)
        << loaded.status().ToString();

    uint64_t lists_before = ufs.stats().list_requests;
    auto rebuilt = Snapshot::LoadOrBuild(ufs, DsOptions(), path);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
    EXPECT_GT(ufs.stats().list_requests, lists_before) << "must list the origin again";
    CheckAgainstModel(**rebuilt, m);
    bool header_intact = d.name != "magic" && d.name != "header field" && size > 0 &&
                         d.name != "empty" && d.name != "short header";
    EXPECT_EQ((*rebuilt)->version(), header_intact ? 8u : 1u);
    EXPECT_TRUE(Snapshot::Load(path).ok());
  }
}

// Applies `edit` to the header, the records and the string table of the
// snapshot at `path`, then seals it again with correct checksums: damage only
// the structural checks can catch (a bug in a writer, not a flipped bit).
void EditAndReseal(const std::string& path,
                   const std::function<void(snapshot_format::FileHeader&,
                                            std::vector<snapshot_format::Record>&, char*)>& edit) {
  using snapshot_format::FileHeader;
  using snapshot_format::Record;
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  FileHeader h;
  std::memcpy(&h, data.data(), sizeof(h));
  std::vector<Record> records(h.entry_count);
  std::memcpy(records.data(), data.data() + h.records_offset, records.size() * sizeof(Record));
  edit(h, records, data.data() + h.strings_offset);
  std::memcpy(data.data() + h.records_offset, records.data(), records.size() * sizeof(Record));
  h.body_checksum = XXH3_64bits(data.data() + h.header_size, data.size() - h.header_size);
  h.header_checksum = 0;
  std::memcpy(data.data(), &h, sizeof(h));
  h.header_checksum = XXH3_64bits(data.data(), h.header_size);
  std::memcpy(data.data(), &h, sizeof(h));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Snapshots whose checksums are right but whose structure is not are
// refused by the structural checks, each naming what is wrong.
TEST(Snapshot, StructuralDamageBehindGoodChecksumsIsRejectedByName) {
  using snapshot_format::FileHeader;
  using snapshot_format::Record;
  using Records = std::vector<Record>;
  testing::MemUfs ufs;
  // Inodes: 1 /, 2 a/, 3 b, 4 c, 5 a/x, 6 a/yy.
  for (const char* key : {"ds/a/x", "ds/a/yy", "ds/b", "ds/c"}) ufs.Put(key, "body");
  struct Damage {
    std::string name;
    std::function<void(FileHeader&, Records&, char*)> edit;
    std::string expect;  // in the message
  };
  const std::vector<Damage> damages = {
      {"unknown flag", [](FileHeader&, Records& r, char*) { r[2].flags |= 0x80; }, "unknown flags"},
      {"name past the string table",
       [](FileHeader& h, Records& r, char*) { r[2].name_off = h.strings_size; },
       "string outside the string table"},
      {"root with a parent", [](FileHeader&, Records& r, char*) { r[0].parent = 2; }, "bad root"},
      {"parent after the child", [](FileHeader&, Records& r, char*) { r[2].parent = 5; },
       "bad name or parent"},
      {"outside the parent's range", [](FileHeader&, Records& r, char*) { r[0].child_count = 1; },
       "not in its parent's child range"},
      {"siblings swapped",
       [](FileHeader&, Records& r, char*) { std::swap(r[2].name_off, r[3].name_off); },
       "siblings not sorted by name"},
      {"directory with a size", [](FileHeader&, Records& r, char*) { r[1].size = 7; },
       "directory with size or etag"},
      {"child range past the end", [](FileHeader&, Records& r, char*) { r[1].first_child = 100; },
       "child range out of bounds"},
      {"file with children", [](FileHeader&, Records& r, char*) { r[2].child_count = 1; },
       "file with children"},
      {"file turned directory",
       [](FileHeader&, Records& r, char*) {
         r[3].flags = snapshot_format::kFlagDir;
         r[3].size = 0;
         r[3].etag_len = 0;
       },
       "counts differ from the header"},
      {"header total bytes", [](FileHeader& h, Records&, char*) { h.total_bytes += 1; },
       "counts differ from the header"},
      {"section offsets", [](FileHeader& h, Records&, char*) { h.strings_offset += 8; },
       "inconsistent section offsets"},
      {"name with a slash", [](FileHeader&, Records& r, char* s) { s[r[5].name_off + 1] = '/'; },
       "not one path component"},
      {"name with a NUL", [](FileHeader&, Records& r, char* s) { s[r[5].name_off + 1] = '\0'; },
       "not one path component"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    TempDir dir;
    const std::string path = dir.File("snap");
    {
      auto built = Snapshot::Build(ufs, DsOptions(), path, 1);
      ASSERT_TRUE(built.ok()) << built.status().ToString();
      ASSERT_EQ((*built)->FindPath("a").value_or(0), 2u);
      ASSERT_EQ((*built)->FindPath("b").value_or(0), 3u);
      ASSERT_EQ((*built)->FindPath("a/yy").value_or(0), 6u);
    }
    EditAndReseal(path, d.edit);
    auto loaded = Snapshot::Load(path);
    ASSERT_FALSE(loaded.ok()) << "accepted";
    EXPECT_EQ(loaded.status().code(), Code::kCorruption) << loaded.status().ToString();
    EXPECT_NE(loaded.status().message().find(d.expect), std::string::npos)
        << loaded.status().ToString();
    EXPECT_EQ(loaded.status().message().find("checksum"), std::string::npos)
        << "the checksums are good: " << loaded.status().ToString();
  }
  // The helper itself leaves a good snapshot good.
  TempDir dir;
  ASSERT_TRUE(Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1).ok());
  EditAndReseal(dir.File("snap"), [](FileHeader&, Records&, char*) {});
  EXPECT_TRUE(Snapshot::Load(dir.File("snap")).ok());
}

TEST(Snapshot, LoadOrBuildLoadsWithoutListingAndRebuildsForAnotherSource) {
  TempDir dir;
  testing::MemUfs ufs;
  Model m = MakeRandomTree(ufs, 9, 100);
  std::string path = dir.File("snap");
  auto first = Snapshot::LoadOrBuild(ufs, DsOptions(), path);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->version(), 1u);
  uint64_t lists = ufs.stats().list_requests;
  EXPECT_GT(lists, 0u);

  auto again = Snapshot::LoadOrBuild(ufs, DsOptions(), path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ufs.stats().list_requests, lists) << "a remount must not list the origin";
  CheckAgainstModel(**again, m);

  SnapshotOptions other{.source_uri = "mem://test/other", .prefix = "other/"};
  auto switched = Snapshot::LoadOrBuild(ufs, other, path);
  ASSERT_TRUE(switched.ok());
  EXPECT_GT(ufs.stats().list_requests, lists);
  EXPECT_EQ((*switched)->version(), 2u);
  EXPECT_EQ((*switched)->file_count(), 1u);
  EXPECT_TRUE((*switched)->FindPath("y").has_value());
}

TEST(Snapshot, LoadOrBuildRemovesTempFilesOfDeadBuildsOnly) {
  TempDir dir;
  testing::MemUfs ufs;
  ufs.Put("ds/a", "a");
  std::string path = dir.File("snap");
  // A pid that cannot be running: above the kernel's pid_max limit (4194304).
  std::ofstream(path + ".tmp.99999999.0") << "half-written";
  std::ofstream(path + ".tmp." + std::to_string(::getpid()) + ".77") << "a live build";
  auto s = Snapshot::LoadOrBuild(ufs, DsOptions(), path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(fs::exists(path + ".tmp.99999999.0"));
  EXPECT_TRUE(fs::exists(path + ".tmp." + std::to_string(::getpid()) + ".77"));
}

// A MemUfs whose listings fail while `fail` is set.
class ListFailingUfs : public testing::MemUfs {
 public:
  bool fail = false;

 protected:
  Result<ListPage> ListImpl(const ListRequest& request) override {
    if (fail) return Unavailable("mem://test: listing refused (injected)");
    return MemUfs::ListImpl(request);
  }
};

TEST(Snapshot, FailedListingKeepsThePreviousVersionOnDisk) {
  TempDir dir;
  ListFailingUfs ufs;
  ufs.Put("ds/a", "a");
  std::string path = dir.File("snap");
  auto v1 = Snapshot::Build(ufs, DsOptions(), path, 1);
  ASSERT_TRUE(v1.ok());
  ufs.fail = true;
  auto v2 = Snapshot::Rebuild(ufs, **v1, path);
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.status().code(), Code::kUnavailable);
  EXPECT_NE(v2.status().message().find("mem://test/ds"), std::string::npos)
      << v2.status().ToString();
  auto still = Snapshot::Load(path);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ((*still)->version(), 1u);
  EXPECT_EQ(
      std::distance(fs::directory_iterator(fs::path(path).parent_path()), fs::directory_iterator{}),
      1);

  Truncate(path, 10);
  auto rebuilt = Snapshot::LoadOrBuild(ufs, DsOptions(), path);
  EXPECT_EQ(rebuilt.status().code(), Code::kUnavailable)
      << "a corrupt snapshot and a failing origin: an error";
}

TEST(Snapshot, MissingFileIsNotFoundAndBadOptionsAreRejected) {
  TempDir dir;
  auto missing = Snapshot::Load(dir.File("nope"));
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.File("nope")), std::string::npos);
  testing::MemUfs ufs;
  auto no_uri = Snapshot::Build(ufs, SnapshotOptions{}, dir.File("s"), 1);
  EXPECT_EQ(no_uri.status().code(), Code::kInvalidArgument);
  auto bad_par = Snapshot::Build(ufs, SnapshotOptions{.source_uri = "u", .list_parallelism = 0},
                                 dir.File("s"), 1);
  EXPECT_EQ(bad_par.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad_par.status().message().find("list_parallelism"), std::string::npos);
  auto no_dir =
      Snapshot::Build(ufs, SnapshotOptions{.source_uri = "u"}, dir.File("no/such/dir/s"), 1);
  EXPECT_EQ(no_dir.status().code(), Code::kNotFound) << no_dir.status().ToString();
}

TEST(Snapshot, BadKeysAreSkippedAndCounted) {
  TempDir dir;
  testing::MemUfs ufs;
  for (const std::string& bad :
       std::vector<std::string>{"ds/a//b", "ds/./x", "ds/../x", "ds/x/..", "ds/y/./z",
                                "ds/" + std::string(256, 'n'), std::string("ds/nul\0x", 8)}) {
    ufs.Put(bad, "bad");
  }
  ufs.Put("ds/", "");      // marker of the dataset root
  ufs.Put("ds/dir/", "");  // directory marker: an (empty) directory
  ufs.Put("ds/m//", "");   // a marker with an empty component: invalid
  ufs.Put("ds/ok/file", "good");
  ufs.Put("ds/" + std::string(255, 'm'), "longest allowed name");
  ufs.Put("ds/f", "file that is also a directory");
  ufs.Put("ds/f/g", "child");
  auto s = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->skipped().invalid_names, 8u);
  EXPECT_EQ((*s)->skipped().dir_markers, 1u);  // the root's own
  EXPECT_EQ((*s)->skipped().file_dir_conflicts, 1u);
  EXPECT_EQ((*s)->file_count(), 3u);
  EXPECT_TRUE((*s)->FindPath("ok/file").has_value());
  EXPECT_TRUE((*s)->FindPath(std::string(255, 'm')).has_value());
  auto f = (*s)->FindPath("f");
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE((*s)->Get(*f)->is_dir);
  EXPECT_TRUE((*s)->FindPath("f/g").has_value());
  auto marked = (*s)->FindPath("dir");
  ASSERT_TRUE(marked.has_value());
  EXPECT_TRUE((*s)->Get(*marked)->is_dir);
  EXPECT_TRUE((*s)->ReadDir(*marked, 0, 10).empty());
  auto loaded = Snapshot::Load(dir.File("snap"));
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ((*loaded)->skipped().total(), 10u);
}

// DLIO's layout: train/ holds the samples, valid/ is an empty directory
// that exists only as a marker object; nested markers make their parents.
TEST(Snapshot, DirectoryMarkersAppearAsDirectories) {
  TempDir dir;
  testing::MemUfs ufs;
  ufs.Put("ds/train/img_1_of_2.npz", "x");
  ufs.Put("ds/train/img_2_of_2.npz", "y");
  ufs.Put("ds/train/", "");
  ufs.Put("ds/valid/", "");
  ufs.Put("ds/deep/er/", "");
  auto s = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->file_count(), 2u);
  std::vector<std::string> root;
  for (const EntryView& e : (*s)->ReadDir(1, 0, 10))
    root.emplace_back(e.name);  // the root is inode 1
  EXPECT_EQ(root, (std::vector<std::string>{"deep", "train", "valid"}));
  for (const char* d : {"valid", "deep", "deep/er", "train"}) {
    auto ino = (*s)->FindPath(d);
    ASSERT_TRUE(ino.has_value()) << d;
    EXPECT_TRUE((*s)->Get(*ino)->is_dir) << d;
  }
  EXPECT_EQ((*s)->ReadDir(*(*s)->FindPath("train"), 0, 10).size(), 2u);
  EXPECT_EQ((*s)->skipped().total(), 0u);
}

TEST(Snapshot, FindPathIgnoresEmptyComponentsAndRootIsInodeOne) {
  TempDir dir;
  testing::MemUfs ufs;
  ufs.Put("ds/a/b/c.txt", "c");
  auto s = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->FindPath(""), 1u);
  EXPECT_EQ((*s)->FindPath("/"), 1u);
  EXPECT_EQ((*s)->FindPath("/a//b/c.txt/"), (*s)->FindPath("a/b/c.txt"));
  EXPECT_EQ((*s)->Get(1)->name, "");
  EXPECT_EQ((*s)->Path(1), "");
  EXPECT_EQ((*s)->Key(*(*s)->FindPath("a/b/c.txt")), "ds/a/b/c.txt");
}

TEST(Snapshot, EmptyDatasetHasOnlyTheRoot) {
  TempDir dir;
  testing::MemUfs ufs;
  auto s = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->max_ino(), 1u);
  EXPECT_TRUE((*s)->ReadDir(1, 0, 10).empty());
  EXPECT_TRUE(Snapshot::Load(dir.File("snap")).ok());
}

TEST(Snapshot, ConcurrentReadersSeeTheSameAnswers) {
  TempDir dir;
  testing::MemUfs ufs;
  Model m = MakeRandomTree(ufs, 11, 400);
  auto s = Snapshot::Build(ufs, DsOptions(), dir.File("snap"), 1);
  ASSERT_TRUE(s.ok());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (const auto& [rel, info] : m.files) {
        auto ino = (*s)->FindPath(rel);
        if (!ino || (*s)->Path(*ino) != rel || (*s)->Get(*ino)->size != info.size) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Snapshot, TwoHundredThousandEntriesBuildAndLoad) {
  TempDir dir;
  std::vector<ObjectInfo> objects;
  for (int d = 0; d < 200; ++d) {
    for (int f = 0; f < 1000; ++f) {
      objects.push_back(ObjectInfo{
          .key = "big/train/d" + std::to_string(d) + "/img_" + std::to_string(f) + ".JPEG",
          .size = static_cast<uint64_t>(100'000 + f),
          .mtime_ns = 1,
          .etag = "0123456789abcdef0123456789abcdef"});
    }
  }
  SnapshotOptions opt{.source_uri = "mem://big", .prefix = "big"};
  auto built = Snapshot::BuildFromEntries(std::move(objects), opt, dir.File("snap"), 1);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  built->reset();
  auto s = Snapshot::Load(dir.File("snap"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->file_count(), 200'000u);
  EXPECT_EQ((*s)->dir_count(), 202u);
  auto ino = (*s)->FindPath("train/d199/img_999.JPEG");
  ASSERT_TRUE(ino.has_value());
  EXPECT_EQ((*s)->Get(*ino)->size, 100'999u);
  EXPECT_EQ((*s)->ReadDir(*(*s)->FindPath("train/d7"), 0, 5000).size(), 1000u);
  uint64_t files = 0;
  (*s)->ForEachFile([&](const EntryView&) { ++files; });
  EXPECT_EQ(files, 200'000u);
}

}  // namespace
}  // namespace granary
