// Real FUSE mounts of DirFs over a generated tree (~2,000 files in nested
// directories, a few larger than 1 MiB): the mount must look and read exactly
// like the source in every read mode and transport, refuse writes with EROFS,
// refuse a second mount, and stop cleanly while readers are active.
//
// Needs root and /dev/fuse (skipped otherwise). The io_uring test switches
// /sys/module/fuse/parameters/enable_uring on for its duration and restores
// the previous value (RAII), or skips when it cannot.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fuse.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fuse/fuse_server.h"
#include "testing/dir_fs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

// The generated source tree, shared by all tests (built once).
struct SourceTree {
  std::string root;
  std::vector<std::string> files;  // relative paths
  std::vector<std::string> dirs;   // relative paths, "" = root
};

SourceTree* g_tree = nullptr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Reads a whole file with read(2) in 1 MiB calls; "" plus errno on failure.
bool ReadFile(const std::string& path, std::string* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  std::vector<char> buf(1 << 20);
  while (true) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf.data(), static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

void BuildTree() {
  g_tree = new SourceTree;
  char tmpl[] = "/tmp/granary-fuse-src-XXXXXX";
  g_tree->root = mkdtemp(tmpl);
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> size_dist(std::log(12000.0), 1.0);
  g_tree->dirs.push_back("");
  std::string chunk(8 << 20, '\0');
  for (auto& c : chunk) c = static_cast<char>(rng());
  int n = 0;
  for (int a = 0; a < 10; ++a) {
    std::string da = "class_" + std::to_string(a);
    g_tree->dirs.push_back(da);
    fs::create_directory(g_tree->root + "/" + da);
    for (int b = 0; b < 4; ++b) {
      std::string db = da + "/part " + std::to_string(b);  // a space in the name on purpose
      g_tree->dirs.push_back(db);
      fs::create_directory(g_tree->root + "/" + db);
      for (int f = 0; f < 50; ++f, ++n) {
        std::string rel = db + "/img_" + std::to_string(n) + ".jpg";
        size_t size = std::min<size_t>(static_cast<size_t>(size_dist(rng)), 300000);
        if (n % 400 == 7) size = (1 << 20) + 4096 * static_cast<size_t>(n % 700) + 123;  // > 1 MiB
        if (n % 500 == 3) size = 0;
        std::ofstream(g_tree->root + "/" + rel, std::ios::binary)
            .write(chunk.data() + (n * 4099) % (1 << 20), static_cast<std::streamsize>(size));
        g_tree->files.push_back(rel);
      }
    }
  }
  fs::create_directory(g_tree->root + "/empty_dir");
  g_tree->dirs.push_back("empty_dir");
}

// An empty directory to mount on, removed (rmdir: never through a mount
// still on it) when it goes.
class MountPointDir {
 public:
  MountPointDir() {
    char tmpl[] = "/tmp/granary-fuse-mnt-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~MountPointDir() { rmdir(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets a sysfs parameter for the lifetime of the object, then restores it.
class SysfsOverride {
 public:
  SysfsOverride(std::string path, const std::string& value) : path_(std::move(path)) {
    std::ifstream in(path_);
    if (!(in >> old_)) return;
    std::ofstream out(path_);
    out << value;
    out.flush();
    ok_ = static_cast<bool>(out);
  }
  ~SysfsOverride() {
    if (!old_.empty()) std::ofstream(path_) << old_;
  }
  bool ok() const { return ok_; }

 private:
  std::string path_;
  std::string old_;
  bool ok_ = false;
};

struct Mounted {
  MountPointDir dir;
  std::unique_ptr<DirFs> fs;
  std::unique_ptr<FuseServer> server;
  std::string Path(const std::string& rel) const {
    return rel.empty() ? dir.path() : dir.path() + "/" + rel;
  }
};

class FuseIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() == 0 && access("/dev/fuse", R_OK | W_OK) == 0 && g_tree == nullptr) BuildTree();
  }
  static void TearDownTestSuite() {
    if (g_tree == nullptr) return;
    std::error_code ignored;
    fs::remove_all(g_tree->root, ignored);
    delete g_tree;
    g_tree = nullptr;
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to mount FUSE";
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  }

  std::unique_ptr<Mounted> Mount(FuseOptions o, bool offer_backing = true) {
    auto m = std::make_unique<Mounted>();
    m->fs =
        std::make_unique<DirFs>(DirFsOptions{.root = g_tree->root, .offer_backing = offer_backing});
    o.mountpoint = m->dir.path();
    m->server = std::make_unique<FuseServer>(m->fs.get(), o);
    Status st = m->server->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return nullptr;
    return m;
  }

  // Every file's bytes through the mount equal the source's.
  void ExpectAllBytesEqual(const Mounted& m) {
    size_t checked = 0;
    for (const auto& rel : g_tree->files) {
      std::string got;
      ASSERT_TRUE(ReadFile(m.Path(rel), &got)) << rel << ": " << strerror(errno);
      ASSERT_EQ(got, ReadAll(g_tree->root + "/" + rel)) << rel;
      ++checked;
    }
    EXPECT_EQ(checked, g_tree->files.size());
  }

  // Random ranged reads (and reads at/after EOF) on the largest files.
  void ExpectRangedReads(const Mounted& m) {
    std::mt19937 rng(7);
    std::vector<std::string> big;
    for (const auto& rel : g_tree->files) {
      if (fs::file_size(g_tree->root + "/" + rel) > (1 << 20)) big.push_back(rel);
    }
    ASSERT_FALSE(big.empty());
    for (const auto& rel : big) {
      std::string src = ReadAll(g_tree->root + "/" + rel);
      int fd = open(m.Path(rel).c_str(), O_RDONLY);
      ASSERT_GE(fd, 0) << rel;
      for (int i = 0; i < 50; ++i) {
        size_t off = rng() % src.size();
        size_t len = 1 + rng() % 300000;
        std::string buf(len, '\0');
        ssize_t n = pread(fd, buf.data(), len, static_cast<off_t>(off));
        size_t want = std::min(len, src.size() - off);
        ASSERT_EQ(n, static_cast<ssize_t>(want)) << rel << " @" << off;
        ASSERT_EQ(buf.substr(0, want), src.substr(off, want)) << rel << " @" << off;
      }
      char c;
      EXPECT_EQ(pread(fd, &c, 1, static_cast<off_t>(src.size())), 0);
      EXPECT_EQ(pread(fd, &c, 1, static_cast<off_t>(src.size()) + 12345), 0);
      close(fd);
    }
  }

  // 16 threads: half read one shared file, half read different files.
  void ExpectConcurrentReaders(const Mounted& m) {
    std::string shared_rel;
    for (const auto& rel : g_tree->files) {
      if (fs::file_size(g_tree->root + "/" + rel) > (1 << 20)) shared_rel = rel;
    }
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    std::latch start(16);
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        for (int i = 0; i < 40; ++i) {
          const std::string& rel =
              t % 2 == 0 ? shared_rel : g_tree->files[(t * 131 + i * 17) % g_tree->files.size()];
          std::string got;
          if (!ReadFile(m.Path(rel), &got) || got != ReadAll(g_tree->root + "/" + rel)) ++bad;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);
  }
};

TEST_F(FuseIntegrationTest, TreeStatAndReaddirMatchTheSource) {
  auto m = Mount(FuseOptions{.transport = FuseTransport::kDev});
  ASSERT_TRUE(m);
  for (const auto& rel : g_tree->dirs) {
    std::vector<std::string> want, got;
    for (const auto& e : fs::directory_iterator(g_tree->root + (rel.empty() ? "" : "/" + rel))) {
      want.push_back(e.path().filename().string());
    }
    DIR* d = opendir(m->Path(rel).c_str());
    ASSERT_NE(d, nullptr) << rel;
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) got.push_back(e->d_name);
    }
    closedir(d);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, want) << "listing of /" << rel;
    struct stat st;
    ASSERT_EQ(stat(m->Path(rel).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode, static_cast<mode_t>(S_IFDIR | 0555)) << rel;
  }
  for (const auto& rel : g_tree->files) {
    struct stat src, st;
    ASSERT_EQ(stat((g_tree->root + "/" + rel).c_str(), &src), 0);
    ASSERT_EQ(stat(m->Path(rel).c_str(), &st), 0) << rel;
    EXPECT_EQ(st.st_size, src.st_size) << rel;
    EXPECT_EQ(st.st_mode, static_cast<mode_t>(S_IFREG | 0444)) << rel;
    EXPECT_EQ(st.st_mtim.tv_sec, src.st_mtim.tv_sec) << rel;
    EXPECT_EQ(st.st_mtim.tv_nsec, src.st_mtim.tv_nsec) << rel;
    EXPECT_EQ(st.st_uid, getuid());
  }
  struct stat missing;
  EXPECT_NE(stat(m->Path("class_0/nope").c_str(), &missing), 0);
  EXPECT_EQ(errno, ENOENT);
}

struct ModeCase {
  const char* name;
  FuseReadMode read_mode;
  FusePassthrough passthrough;
};

class FuseModeTest : public FuseIntegrationTest, public ::testing::WithParamInterface<ModeCase> {};

TEST_P(FuseModeTest, BytesRangesAndConcurrentReadersMatchTheSource) {
  const ModeCase& c = GetParam();
  auto m = Mount(FuseOptions{
      .transport = FuseTransport::kDev, .read_mode = c.read_mode, .passthrough = c.passthrough});
  ASSERT_TRUE(m);
  ExpectAllBytesEqual(*m);
  ExpectRangedReads(*m);
  ExpectConcurrentReaders(*m);
  FuseStats st = m->server->stats();
  bool passthrough = m->server->session().passthrough;
  if (c.passthrough == FusePassthrough::kOn) {
    EXPECT_TRUE(passthrough);
  }
  if (passthrough) {
    EXPECT_GT(st.passthrough_opens, 0u);
    EXPECT_EQ(st.userspace_reads, 0u);
    EXPECT_GT(st.backing_ids_open, 0u);
    EXPECT_EQ(st.backing_open_failures, 0u);
  } else {
    EXPECT_EQ(st.passthrough_opens, 0u);
    EXPECT_GT(st.userspace_reads, 0u);
  }
  EXPECT_EQ(st.uring_requests, 0u);  // transport dev
  if (c.read_mode == FuseReadMode::kCached) {
    EXPECT_LE(st.requests_by_opcode[FUSE_OPEN], 1u);  // no-open after the first ENOSYS
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, FuseModeTest,
    ::testing::Values(ModeCase{"passthrough_on", FuseReadMode::kPassthrough, FusePassthrough::kOn},
                      ModeCase{"passthrough_off", FuseReadMode::kPassthrough,
                               FusePassthrough::kOff},
                      ModeCase{"cached", FuseReadMode::kCached, FusePassthrough::kAuto}),
    [](const auto& info) { return std::string(info.param.name); });

// Directory read-ahead: after two files of a directory are opened by name,
// the daemon lists it through the mount, so opening the rest needs no LOOKUP
// round trip (a loader reading from a file list on a fresh mount). Off, every
// file costs one. Bytes are the source's either way.
TEST_F(FuseIntegrationTest, OpeningFilesByNameListsTheirDirectoryAhead) {
  const std::string dir = "class_3/part 2";  // nested, with a space in its name
  std::vector<std::string> files;
  for (const auto& rel : g_tree->files) {
    if (rel.rfind(dir + "/", 0) == 0) files.push_back(rel);
  }
  ASSERT_EQ(files.size(), 50u);
  for (FuseReadMode mode : {FuseReadMode::kPassthrough, FuseReadMode::kCached}) {
    for (bool prefetch : {true, false}) {
      SCOPED_TRACE(std::string(FuseReadModeName(mode)) +
                   (prefetch ? ", prefetch" : ", no prefetch"));
      auto m = Mount(FuseOptions{
          .transport = FuseTransport::kDev, .read_mode = mode, .dir_prefetch = prefetch});
      ASSERT_TRUE(m);
      std::string got;
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(ReadFile(m->Path(files[static_cast<size_t>(i)]), &got));
      }
      if (prefetch) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (m->server->stats().dirs_prefetched < 1 &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        ASSERT_EQ(m->server->stats().dirs_prefetched, 1u) << "the directory was not listed ahead";
      }
      uint64_t lookups_before = m->server->stats().requests_by_opcode[FUSE_LOOKUP];
      for (size_t i = 2; i < files.size(); ++i) {
        ASSERT_TRUE(ReadFile(m->Path(files[i]), &got)) << files[i];
        ASSERT_EQ(got, ReadAll(g_tree->root + "/" + files[i])) << files[i];
      }
      uint64_t lookups = m->server->stats().requests_by_opcode[FUSE_LOOKUP] - lookups_before;
      EXPECT_EQ(lookups, prefetch ? 0u : files.size() - 2);
      EXPECT_EQ(m->server->stats().dirs_prefetched, prefetch ? 1u : 0u);
    }
  }
}

TEST_F(FuseIntegrationTest, WritesFailWithErofsAndTheSourceIsUnchanged) {
  auto m = Mount(FuseOptions{});
  ASSERT_TRUE(m);
  const std::string file = m->Path(g_tree->files[1]);
  std::string before = ReadAll(g_tree->root + "/" + g_tree->files[1]);
  auto expect_erofs = [](int rc, const char* what) {
    EXPECT_EQ(rc, -1) << what;
    EXPECT_EQ(errno, EROFS) << what << ": " << strerror(errno);
  };
  expect_erofs(open(file.c_str(), O_WRONLY), "open O_WRONLY");
  expect_erofs(open(file.c_str(), O_RDWR), "open O_RDWR");
  expect_erofs(open(m->Path("new_file").c_str(), O_CREAT | O_WRONLY, 0644), "create");
  expect_erofs(mkdir(m->Path("new_dir").c_str(), 0755), "mkdir");
  expect_erofs(unlink(file.c_str()), "unlink");
  expect_erofs(rename(file.c_str(), m->Path("renamed").c_str()), "rename");
  expect_erofs(rmdir(m->Path("empty_dir").c_str()), "rmdir");
  expect_erofs(truncate(file.c_str(), 0), "truncate");
  expect_erofs(chmod(file.c_str(), 0777), "chmod");
  expect_erofs(symlink("x", m->Path("link").c_str()), "symlink");
  expect_erofs(link(file.c_str(), m->Path("hard").c_str()), "link");
  EXPECT_EQ(ReadAll(g_tree->root + "/" + g_tree->files[1]), before);
  EXPECT_FALSE(fs::exists(g_tree->root + "/new_file"));
  EXPECT_FALSE(fs::exists(g_tree->root + "/new_dir"));
  EXPECT_TRUE(fs::exists(g_tree->root + "/empty_dir"));
}

TEST_F(FuseIntegrationTest, SecondMountOnTheSameMountPointIsRefused) {
  auto m = Mount(FuseOptions{});
  ASSERT_TRUE(m);
  DirFs other(DirFsOptions{.root = g_tree->root});
  FuseServer second(&other, FuseOptions{.mountpoint = m->dir.path()});
  Status st = second.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("already a mount point"), std::string::npos) << st.ToString();
  std::string got;
  EXPECT_TRUE(ReadFile(m->Path(g_tree->files[0]), &got));  // the first mount still works
}

TEST_F(FuseIntegrationTest, MissingOrNonEmptyMountPointIsAClearError) {
  DirFs dirfs(DirFsOptions{.root = g_tree->root});
  FuseServer missing(&dirfs, FuseOptions{.mountpoint = "/tmp/granary-no-such-dir-xyz"});
  Status st = missing.Start();
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  FuseServer non_empty(&dirfs, FuseOptions{.mountpoint = g_tree->root});
  st = non_empty.Start();
  EXPECT_NE(st.message().find("not empty"), std::string::npos) << st.ToString();
}

TEST_F(FuseIntegrationTest, StopWhileReadersAreActiveGivesErrorsNotHangs) {
  for (FuseReadMode mode : {FuseReadMode::kPassthrough, FuseReadMode::kCached}) {
    auto m = Mount(FuseOptions{.transport = FuseTransport::kDev, .read_mode = mode});
    ASSERT_TRUE(m);
    std::latch reading(16);
    std::atomic<int> failed_readers{0};
    std::vector<std::future<void>> readers;
    for (int t = 0; t < 16; ++t) {
      readers.push_back(std::async(std::launch::async, [&, t] {
        bool counted = false;
        for (size_t i = 0;; ++i) {
          std::string got;
          const std::string& rel = g_tree->files[(t * 97 + i) % g_tree->files.size()];
          if (!ReadFile(m->Path(rel), &got)) {
            ++failed_readers;
            if (!counted) reading.count_down();
            return;
          }
          if (!counted && i >= 3) {
            reading.count_down();
            counted = true;
          }
        }
      }));
    }
    reading.wait();
    m->server->Stop();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (auto& r : readers) {
      ASSERT_EQ(r.wait_until(deadline), std::future_status::ready) << "a reader hung after Stop";
    }
    EXPECT_EQ(failed_readers.load(), 16);
    struct stat st;
    EXPECT_EQ(stat((m->dir.path() + "/class_0").c_str(), &st), -1);  // unmounted
  }
}

TEST_F(FuseIntegrationTest, MountThroughFusermountWorksToo) {
  if (access("/usr/bin/fusermount3", X_OK) != 0 && access("/usr/bin/fusermount", X_OK) != 0) {
    GTEST_SKIP() << "no fusermount3/fusermount installed";
  }
  auto m = Mount(FuseOptions{.transport = FuseTransport::kDev, .force_fusermount = true});
  ASSERT_TRUE(m);
  std::string got;
  ASSERT_TRUE(ReadFile(m->Path(g_tree->files[5]), &got));
  EXPECT_EQ(got, ReadAll(g_tree->root + "/" + g_tree->files[5]));
}

TEST_F(FuseIntegrationTest, IoUringTransportServesTheSameBytes) {
  const std::string param = "/sys/module/fuse/parameters/enable_uring";
  if (access(param.c_str(), F_OK) != 0) GTEST_SKIP() << "kernel has no FUSE over io_uring";
  SysfsOverride enable(param, "Y");
  if (!enable.ok()) GTEST_SKIP() << "cannot set " << param << " to Y";
  for (FuseReadMode mode : {FuseReadMode::kPassthrough, FuseReadMode::kCached}) {
    auto m = Mount(FuseOptions{.transport = FuseTransport::kUring, .read_mode = mode});
    ASSERT_TRUE(m);
    EXPECT_EQ(m->server->session().transport, FuseTransport::kUring);
    ExpectAllBytesEqual(*m);
    ExpectRangedReads(*m);
    ExpectConcurrentReaders(*m);
    FuseStats st = m->server->stats();
    EXPECT_GT(st.uring_requests, st.requests / 2) << "requests did not travel over io_uring";
    m->server->Stop();
  }
}

TEST_F(FuseIntegrationTest, UringRequestedButDisabledFailsLoudly) {
  const std::string param = "/sys/module/fuse/parameters/enable_uring";
  if (access(param.c_str(), F_OK) != 0) GTEST_SKIP() << "kernel has no FUSE over io_uring";
  SysfsOverride disable(param, "N");
  if (!disable.ok()) GTEST_SKIP() << "cannot set " << param;
  MountPointDir dir;
  DirFs dirfs(DirFsOptions{.root = g_tree->root});
  FuseServer server(&dirfs,
                    FuseOptions{.mountpoint = dir.path(), .transport = FuseTransport::kUring});
  Status st = server.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("enable_uring"), std::string::npos) << st.ToString();
  // auto falls back to /dev/fuse.
  auto m = Mount(FuseOptions{.transport = FuseTransport::kAuto});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->server->session().transport, FuseTransport::kDev);
}

}  // namespace
}  // namespace granary
