// Dataset: opening through the one wiring, sync, and a two-node cluster over
// loopback (real peer server and clients, static membership), each node's
// origin an in-memory store whose reads are counted.
#include "dataset/dataset.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "cluster/cluster_node.h"
#include "testing/mem_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("granary-ds-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    origin_ = std::make_shared<testing::MemUfs>("mem://bkt");
    // Both nodes read one origin; MemUfs counts every read.
    for (int i = 0; i < 60; ++i) {
      std::string body(1000 + i * 37, static_cast<char>('a' + i % 26));
      objects_["f" + std::to_string(i)] = body;
      origin_->Put("ds/f" + std::to_string(i), body);
    }
    // Two objects larger than one block (16 KiB): placed block by block.
    for (int i = 0; i < 2; ++i) {
      std::string body(50'000 + i, static_cast<char>('A' + i));
      for (size_t k = 0; k < body.size(); k += 97) body[k] = static_cast<char>('0' + k % 10);
      objects_["big" + std::to_string(i)] = body;
      origin_->Put("ds/big" + std::to_string(i), body);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  DatasetOptions Options(const std::string& node) {
    DatasetOptions o;
    o.source = "s3://bkt/ds";
    o.cache_dirs = {TierLevel{.path = (dir_ / node).string(), .quota = 64 << 20}};
    o.block_size = 16 << 10;
    o.engine.origin_concurrency = 8;
    o.store_background = false;
    return o;
  }

  // Reads every object through `ds` and checks the bytes.
  void ReadAll(Dataset& ds) {
    auto snap = ds.snapshot();
    for (const auto& [name, body] : objects_) {
      auto ino = snap->FindPath(name);
      ASSERT_TRUE(ino.has_value()) << name;
      std::string out(body.size() + 10, '\0');
      auto n = ds.engine().Read(snap, *ino, 0, std::span<char>(out.data(), out.size()));
      ASSERT_TRUE(n.ok()) << name << ": " << n.status().ToString();
      ASSERT_EQ(*n, body.size()) << name;
      ASSERT_EQ(out.substr(0, *n), body) << name;
    }
  }

  uint64_t Blocks() const {
    uint64_t n = 0;
    for (const auto& [name, body] : objects_) n += (body.size() + (16 << 10) - 1) / (16 << 10);
    return n;
  }

  fs::path dir_;
  std::shared_ptr<testing::MemUfs> origin_;
  std::map<std::string, std::string> objects_;
};

TEST_F(DatasetTest, OpensReadsAndReopensWarm) {
  {
    auto ds = Dataset::Open(Options("a"), origin_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ((*ds)->id(), DatasetId("s3://bkt/ds"));
    EXPECT_EQ((*ds)->cluster(), nullptr);
    ReadAll(**ds);
    EXPECT_EQ((*ds)->engine().stats().origin_requests, Blocks());
    ASSERT_TRUE((*ds)->Close().ok());
  }
  auto again = Dataset::Open(Options("a"), origin_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ReadAll(**again);
  EXPECT_EQ((*again)->engine().stats().origin_requests, 0u) << "a reopened dataset is warm";
}

TEST_F(DatasetTest, SyncDropsChangedObjects) {
  auto ds = Dataset::Open(Options("a"), origin_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ReadAll(**ds);
  // Reads admit in the background: wait until f1's cache file exists (Fetch
  // waits for the admission), so the sync has one to drop.
  auto snap = (*ds)->snapshot();
  auto f1 = (*ds)->engine().Fetch(snap, *snap->FindPath("f1"));
  ASSERT_TRUE(f1.ok() && *f1) << (f1.ok() ? "not admitted" : f1.status().ToString());
  origin_->Put("ds/f1", "changed");
  objects_["f1"] = "changed";
  bool switched = false;
  auto r = (*ds)->Sync([&](const std::shared_ptr<const Snapshot>& next, SyncResult&) {
    switched = next->version() > 1;
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(switched);
  EXPECT_EQ(r->changed, 1u);
  EXPECT_EQ(r->cache_files_dropped, 1u);
  ReadAll(**ds);
}

// Modes (permission bits) of `root` and of everything under it that are not
// `dir_mode` for directories or `file_mode` for files: "path mode" lines for
// the first five, then how many there are.
std::string WrongModes(const fs::path& root, mode_t dir_mode, mode_t file_mode) {
  std::string wrong;
  int count = 0;
  auto check = [&](const fs::path& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return;
    const mode_t want = S_ISDIR(st.st_mode) ? dir_mode : file_mode;
    if ((st.st_mode & 07777) != want && ++count <= 5) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
      wrong += p.string() + " " + mode + "\n";
    }
  };
  check(root);
  for (const auto& e : fs::recursive_directory_iterator(root)) check(e.path());
  return count == 0 ? "" : wrong + std::to_string(count) + " with wider modes";
}

// Sets every directory under `root` (and root) to 0755 and every file to 0644.
void MakeWorldReadable(const fs::path& root) {
  ::chmod(root.c_str(), 0755);
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    ::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644);
  }
}

// Cache dirs (disk and memory tier, dataset dir, index) are 0700 and
// cache files (blocks, snapshot, index, LOCK) 0600 whatever the umask; a cache
// left 0755/0644 by an older version is made private at open.
TEST_F(DatasetTest, CacheIsPrivateToItsUser) {
  // A dataset of its own: the memory tier's /dev/shm dir is named by dataset id.
  const std::string prefix = "private-" + std::to_string(getpid());
  origin_->Put(prefix + "/one", std::string(40'000, '1'));
  origin_->Put(prefix + "/two", std::string(3'000, '2'));
  DatasetOptions o = Options("a");
  o.source = "s3://bkt/" + prefix;
  o.mem_cache = 32 << 10;  // the MEM tier holds a block or two; the rest goes to disk
  const std::string id = DatasetId(o.source);
  const fs::path disk = dir_ / "a" / id;
  const fs::path mem = "/dev/shm/granary-" + id;
  struct RemoveMem {
    fs::path dir;
    ~RemoveMem() { fs::remove_all(dir); }
  } remove_mem{mem};
  const mode_t old_umask = ::umask(022);

  auto read = [&](Dataset& ds, const std::string& name, size_t size) {
    auto snap = ds.snapshot();
    auto ino = snap->FindPath(name);
    ASSERT_TRUE(ino.has_value()) << name;
    std::string out(size, '\0');
    auto n = ds.engine().Read(snap, *ino, 0, std::span<char>(out.data(), out.size()));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, size);
  };
  {
    auto ds = Dataset::Open(o, origin_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    read(**ds, "one", 40'000);
    ASSERT_TRUE((*ds)->Close().ok());
  }
  ASSERT_TRUE(fs::exists(disk / "snapshot"));
  ASSERT_TRUE(fs::exists(disk / "index"));
  EXPECT_EQ(WrongModes(disk, 0700, 0600), "") << "a new cache is private";
  EXPECT_EQ(WrongModes(mem, 0700, 0600), "") << "a new memory tier is private";

  MakeWorldReadable(disk);
  MakeWorldReadable(mem);
  {
    auto ds = Dataset::Open(o, origin_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ(WrongModes(disk, 0700, 0600), "") << "an old cache is made private at open";
    EXPECT_EQ(WrongModes(mem, 0700, 0600), "") << "an old memory tier is made private at open";
    read(**ds, "two", 3'000);  // admitted into the reopened cache
    ASSERT_TRUE((*ds)->Close().ok());
  }
  EXPECT_EQ(WrongModes(disk, 0700, 0600), "");
  EXPECT_EQ(WrongModes(mem, 0700, 0600), "");
  ::umask(old_umask);
}

TEST_F(DatasetTest, TierDirOfAnotherUserOrALinkIsRefused) {
  // The memory tier's path is predictable: another local user can create it
  // first, as a directory of theirs or as a link to one.
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a directory of another user";
  const std::string prefix = "foreign-" + std::to_string(getpid());
  origin_->Put(prefix + "/one", std::string(3'000, '1'));
  DatasetOptions o = Options("a");
  o.source = "s3://bkt/" + prefix;
  o.mem_cache = 32 << 10;
  const std::string id = DatasetId(o.source);
  const fs::path mem = "/dev/shm/granary-" + id;
  const fs::path elsewhere = dir_ / "planted";
  struct Remove {
    fs::path a, b;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(a, ec);
      fs::remove_all(b, ec);
    }
  } remove{mem, elsewhere};

  // A directory owned by someone else (nobody, 65534), world-writable.
  ASSERT_TRUE(fs::create_directory(mem));
  ASSERT_EQ(::chmod(mem.c_str(), 0777), 0);
  ASSERT_EQ(::chown(mem.c_str(), 65534, 65534), 0) << std::strerror(errno);
  auto ds = Dataset::Open(o, origin_);
  ASSERT_FALSE(ds.ok()) << "a tier dir of uid 65534 was used";
  EXPECT_EQ(ds.status().code(), Code::kPermissionDenied);
  EXPECT_NE(ds.status().message().find(mem.string()), std::string::npos) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find("uid 65534"), std::string::npos) << ds.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(mem.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u) << "the foreign directory was changed";
  EXPECT_TRUE(fs::is_empty(mem)) << "something was written into the foreign directory";
  fs::remove_all(mem);

  // A symbolic link to a directory elsewhere.
  ASSERT_TRUE(fs::create_directory(elsewhere));
  ASSERT_EQ(::chmod(elsewhere.c_str(), 0755), 0);
  fs::create_directory_symlink(elsewhere, mem);
  ds = Dataset::Open(o, origin_);
  ASSERT_FALSE(ds.ok()) << "a tier dir that is a symlink was followed";
  EXPECT_NE(ds.status().message().find("symbolic link"), std::string::npos)
      << ds.status().ToString();
  EXPECT_TRUE(fs::is_empty(elsewhere)) << "the cache was written through the link";
  ASSERT_EQ(::stat(elsewhere.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "the link's target was chmod'ed";
  fs::remove(mem);

  // Once the path is free, the dataset opens and makes its own directory.
  ds = Dataset::Open(o, origin_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(::lstat(mem.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, ::geteuid());
  ASSERT_TRUE((*ds)->Close().ok());
}

TEST_F(DatasetTest, BadClusterOptionsNameTheFlag) {
  DatasetOptions o = Options("a");
  o.cluster.listen = "127.0.0.1:1";
  auto ds = Dataset::Open(o, origin_);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("--cluster-secret-file"), std::string::npos)
      << ds.status().ToString();
  o.cluster.insecure = true;
  o.cluster.peers = "127.0.0.1:1,not an address";
  ds = Dataset::Open(o, origin_);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("not an address"), std::string::npos)
      << ds.status().ToString();
}

// Two nodes, static peers on loopback: together they read every block from
// the origin once; each reads the other's share over the peer protocol.
// Closing a dataset whose origin has stalled (a POSIX/NFS read that
// never returns) does not wait out the origin timeout: the origin the dataset
// opened is aborted, the reader gets an error, and Close returns at once.
TEST_F(DatasetTest, CloseAbortsAReadStuckOnAStalledOrigin) {
  const fs::path src = dir_ / "src";
  fs::create_directories(src);
  { std::ofstream(src / "a") << std::string(100, 'x'); }
  DatasetOptions o = Options("stalled");
  o.source = src.string();
  auto ds = Dataset::Open(o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  // The file now hangs on open (a FIFO without a writer), as on a hung NFS server.
  fs::remove(src / "a");
  ASSERT_EQ(::mkfifo((src / "a").c_str(), 0600), 0);
  auto snap = (*ds)->snapshot();
  const uint64_t ino = snap->FindPath("a").value_or(0);
  auto read = std::async(std::launch::async, [&] {
    std::string out(100, '\0');
    return (*ds)->engine().Read(snap, ino, 0, std::span<char>(out.data(), out.size()));
  });
  while ((*ds)->ufs().stats().read_requests == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status closed = (*ds)->Close();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_FALSE(read.get().ok());
  EXPECT_LT(took, std::chrono::seconds(20));  // the origin's own timeout is 60 s
  // Let the helper thread stuck in open(2) go.
  int fd = ::open((src / "a").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
}

TEST_F(DatasetTest, TwoNodesFetchEachBlockOnce) {
  // Fixed ports are needed for the static list: take two free ones.
  auto free_port = [] {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  };
  const std::string a1 = "127.0.0.1:" + std::to_string(free_port());
  const std::string a2 = "127.0.0.1:" + std::to_string(free_port());
  std::ofstream(dir_ / "secret") << "s3cr3t-for-the-test\n";
  fs::permissions(dir_ / "secret", fs::perms::owner_read | fs::perms::owner_write);
  auto options = [&](const std::string& node, const std::string& listen) {
    DatasetOptions o = Options(node);
    o.cluster.listen = listen;
    o.cluster.peers = a1 + "," + a2;
    o.cluster.secret_file = (dir_ / "secret").string();
    return o;
  };
  auto n1 = Dataset::Open(options("n1", a1), origin_);
  ASSERT_TRUE(n1.ok()) << n1.status().ToString();
  auto n2 = Dataset::Open(options("n2", a2), origin_);
  ASSERT_TRUE(n2.ok()) << n2.status().ToString();
  ASSERT_NE((*n1)->cluster(), nullptr);

  const uint64_t before = origin_->stats().read_requests;
  std::thread t1([&] { ReadAll(**n1); });
  std::thread t2([&] { ReadAll(**n2); });
  t1.join();
  t2.join();
  EXPECT_EQ(origin_->stats().read_requests - before, Blocks())
      << "every block leaves the origin once for the cluster";
  const EngineStats s1 = (*n1)->engine().stats(), s2 = (*n2)->engine().stats();
  EXPECT_GT(s1.peer_blocks, 0u);
  EXPECT_GT(s2.peer_blocks, 0u);
  EXPECT_EQ(s1.origin_requests + s2.origin_requests, Blocks());

  // Node 2 goes away (its peer server closed): a third node, listing it,
  // still reads every byte -- node 2's share from node 1 or the origin.
  ASSERT_TRUE((*n2)->Close().ok());
  const std::string a3 = "127.0.0.1:" + std::to_string(free_port());
  DatasetOptions o3 = options("n3", a3);
  o3.cluster.peers = a1 + "," + a2 + "," + a3;
  o3.cluster.peer_timeout = std::chrono::milliseconds(2000);
  auto n3 = Dataset::Open(o3, origin_);
  ASSERT_TRUE(n3.ok()) << n3.status().ToString();
  ReadAll(**n3);
  EXPECT_EQ((*n3)->engine().stats().read_errors, 0u);
  EXPECT_GT((*n3)->engine().stats().peer_blocks, 0u);

  // A client-only member reads through the owners and opens no port.
  auto refused = [](const std::string& address) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.find(':') + 1))));
    const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return !connected;
  };
  const std::string a4 = "127.0.0.1:" + std::to_string(free_port());
  DatasetOptions o4 = options("n4", a4);
  o4.cluster.client_only = true;
  auto n4 = Dataset::Open(o4, origin_);
  ASSERT_TRUE(n4.ok()) << n4.status().ToString();
  EXPECT_TRUE(refused(a4)) << "a client-only member listens on " << a4;
  ReadAll(**n4);
  EXPECT_EQ((*n4)->engine().stats().read_errors, 0u);
  EXPECT_GT((*n4)->engine().stats().peer_blocks, 0u);
  // ... and is refused when a static list names it (it would become an owner).
  DatasetOptions o5 = options("n5", a4);
  o5.cluster.client_only = true;
  o5.cluster.peers = a1 + "," + a4;
  auto n5 = Dataset::Open(o5, origin_);
  ASSERT_FALSE(n5.ok());
  EXPECT_EQ(n5.status().code(), Code::kInvalidArgument);
  EXPECT_NE(n5.status().message().find("--cluster-client-only"), std::string::npos)
      << n5.status().ToString();
}

// A cache directory on a small tmpfs of its own (a disk the cache
// fills). Skips when tmpfs cannot be mounted (not root, no CAP_SYS_ADMIN); the
// mount is detached in TearDown, whatever the test did.
class DatasetSmallDiskTest : public DatasetTest {
 protected:
  void TearDown() override {
    if (mounted_) ::umount2(disk_.c_str(), MNT_DETACH);
    DatasetTest::TearDown();
  }

  // Mounts a tmpfs of `size` ("8m") at dir_/disk; false if that is refused.
  bool MountDisk(const std::string& size) {
    disk_ = dir_ / "disk";
    fs::create_directories(disk_);
    mounted_ = ::mount("tmpfs", disk_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    return mounted_;
  }

  // The dataset's options with the small disk as its only cache dir, auto quota.
  DatasetOptions SmallDiskOptions() {
    DatasetOptions o = Options("unused");
    o.cache_dirs = {TierLevel{.path = disk_.string()}};
    return o;
  }

  fs::path disk_;
  bool mounted_ = false;
};

TEST_F(DatasetSmallDiskTest, RemountOfAFullCacheEvictsNothing) {
  if (!MountDisk("8m")) GTEST_SKIP() << "cannot mount tmpfs: " << std::strerror(errno);
  // About 5.2 MiB of objects on an 8 MiB disk: most of the first auto quota.
  for (int i = 0; i < 20; ++i) {
    std::string body(256 << 10, static_cast<char>('k' + i % 10));
    objects_["w" + std::to_string(i)] = body;
    origin_->Put("ds/w" + std::to_string(i), body);
  }
  uint64_t first_quota = 0;
  {
    auto ds = Dataset::Open(SmallDiskOptions(), origin_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    ReadAll(**ds);
    ASSERT_EQ((*ds)->engine().stats().origin_requests, Blocks());
    (*ds)->store().RunEvictionOnce();
    first_quota = (*ds)->store().stats().tiers.at(0).quota;
    ASSERT_TRUE((*ds)->Close().ok());
  }
  auto again = Dataset::Open(SmallDiskOptions(), origin_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GE((*again)->store().stats().tiers.at(0).quota, first_quota)
      << "the cache's own files count as room for it";
  (*again)->store().RunEvictionOnce();
  EXPECT_EQ((*again)->store().stats().evictions, 0u);
  ReadAll(**again);
  EXPECT_EQ((*again)->engine().stats().origin_requests, 0u) << "every object is still cached";
}

TEST_F(DatasetSmallDiskTest, FullDiskAtOpenServesFromTheOrigin) {
  if (!MountDisk("64k")) GTEST_SKIP() << "cannot mount tmpfs: " << std::strerror(errno);
  {
    std::ofstream junk(disk_ / "junk", std::ios::binary);
    const std::string chunk(4096, 'j');
    for (int i = 0; i < 64 && junk.write(chunk.data(), chunk.size()); ++i) junk.flush();
  }
  auto ds = Dataset::Open(SmallDiskOptions(), origin_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ReadAll(**ds);
  EXPECT_EQ((*ds)->engine().stats().origin_requests, Blocks());
  EXPECT_EQ((*ds)->engine().stats().read_errors, 0u);
  EXPECT_EQ((*ds)->engine().stats().admitted, 0u);

  // Space frees up: the store admits again without a remount.
  fs::remove(disk_ / "junk");
  auto snap = (*ds)->snapshot();
  auto entry = snap->Get(*snap->FindPath("f0"));
  ASSERT_TRUE(entry.has_value());
  const ObjectKey key = (*ds)->engine().KeyOf(*snap, *entry);
  auto admitted = (*ds)->store().AdmitObject(key, objects_["f0"]);
  ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
  EXPECT_TRUE(*admitted);
  EXPECT_TRUE((*ds)->store().Contains(key));
}

}  // namespace
}  // namespace granary
