// `granary mount` / `granary umount` end to end: the built binary mounts a
// posix tree (~1,200 files in nested directories, a few 3 MiB files larger
// than the 1 MiB block size) and an S3 bucket on moto_server, and the mount
// must look and read exactly like the source; after a warm-up, a remount is
// served by kernel passthrough with zero origin reads (asserted through the
// daemon's stats file); writes fail with EROFS; a SIGKILLed daemon is cleaned
// up by `granary umount`; bad inputs give one clear error line and leave
// nothing mounted.
//
// Needs root and /dev/fuse (skipped otherwise). Every mount is undone by an
// RAII guard (granary umount, then a lazy unmount) also when a test fails.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli_runner.h"
#include "daemon/daemon.h"
#include "fuse/fuse_server.h"
#include "moto_bucket.h"
#include "testing/dir_fs.h"
#include "testing/moto_server.h"
#include "ufs/s3_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::RunGranary;
using testing::TempDir;

constexpr uint64_t kBlock = 1 << 20;

// path relative to the root -> bytes.
using Tree = std::map<std::string, std::string>;

Tree MakeTree(int files, int big_files, uint32_t seed) {
  Tree t;
  std::mt19937 rng(seed);
  for (int i = 0; i < files; ++i) {
    std::string rel = "train/c" + std::to_string(i % 23) + "/s" + std::to_string(i % 3) + "/img" +
                      std::to_string(i) + ".jpg";
    t[rel] = testing::RandomBytes(rng() % 30000, seed + i);
  }
  for (int i = 0; i < big_files; ++i) {
    t["big/blob" + std::to_string(i) + ".bin"] = testing::RandomBytes(3 * kBlock + 12345 * i, i);
  }
  t["empty"] = "";
  t["top.txt"] = "hello";
  return t;
}

bool ReadWhole(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// Every regular file under `root` (relative path -> stat), and every directory.
void Walk(const std::string& root, const std::string& rel,
          std::map<std::string, struct stat>* files, std::vector<std::string>* dirs) {
  DIR* d = ::opendir((root + "/" + rel).c_str());
  ASSERT_NE(d, nullptr) << rel << ": " << std::strerror(errno);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string child = rel.empty() ? name : rel + "/" + name;
    struct stat st {};
    ASSERT_EQ(::stat((root + "/" + child).c_str(), &st), 0) << child;
    if (S_ISDIR(st.st_mode)) {
      dirs->push_back(child);
      Walk(root, child, files, dirs);
    } else {
      (*files)[child] = st;
    }
  }
  ::closedir(d);
}

class MountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) return;
    src_ = new TempDir();
    tree_ = new Tree(MakeTree(1200, 3, 1));
    for (const auto& [rel, data] : *tree_) src_->Write(rel, data);
  }
  static void TearDownTestSuite() {
    delete src_;
    delete tree_;
    src_ = nullptr;
    tree_ = nullptr;
  }
  void SetUp() override {
    if (src_ == nullptr) GTEST_SKIP() << "needs root and /dev/fuse";
    mp_ = work_.path() + "/mnt";
    fs::create_directories(mp_);
  }
  void TearDown() override {
    if (src_ == nullptr) return;
    if (IsMountpoint(mp_)) {
      RunGranary({"umount", "--run-dir", RunDir(), mp_});
      if (IsMountpoint(mp_)) UnmountFuse(mp_).IgnoreError();
    }
  }

  std::string RunDir() const { return work_.path() + "/run"; }
  std::string CacheDir() const { return work_.path() + "/cache"; }

  ProcessResult Mount(const std::string& source, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"mount",
                                     source,
                                     mp_,
                                     "--cache-dir",
                                     CacheDir() + ":1G",
                                     "--block-size",
                                     "1MiB",
                                     "--run-dir",
                                     RunDir(),
                                     "--fuse-threads",
                                     "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunGranary(args);
  }
  void MustMount(const std::string& source, std::vector<std::string> extra = {}) {
    ProcessResult r = Mount(source, std::move(extra));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(IsMountpoint(mp_));
  }
  // Unmounts and returns the stats the daemon wrote on exit.
  nlohmann::json UmountStats() {
    ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(IsMountpoint(mp_));
    std::ifstream in(RunFilePath(RunDir(), mp_, "stats.json"));
    if (!in) return nlohmann::json::object();
    return nlohmann::json::parse(in, nullptr, false);
  }
  // Every file of the tree read through the mount equals the source.
  void ExpectAllBytesEqual(const Tree& tree) {
    for (const auto& [rel, data] : tree) {
      std::string got;
      ASSERT_TRUE(ReadWhole(mp_ + "/" + rel, &got)) << rel << ": " << std::strerror(errno);
      ASSERT_EQ(got.size(), data.size()) << rel;
      ASSERT_TRUE(got == data) << rel;
    }
  }

  static TempDir* src_;
  static Tree* tree_;
  TempDir work_;
  std::string mp_;
};

TempDir* MountTest::src_ = nullptr;
Tree* MountTest::tree_ = nullptr;

TEST_F(MountTest, PosixTreeStatAndReaddirEqualTheSource) {
  MustMount(src_->path());
  std::map<std::string, struct stat> files, src_files;
  std::vector<std::string> dirs, src_dirs;
  Walk(mp_, "", &files, &dirs);
  Walk(src_->path(), "", &src_files, &src_dirs);
  std::sort(dirs.begin(), dirs.end());
  std::sort(src_dirs.begin(), src_dirs.end());
  EXPECT_EQ(dirs, src_dirs);
  ASSERT_EQ(files.size(), src_files.size());
  for (const auto& [rel, st] : files) {
    auto it = src_files.find(rel);
    ASSERT_NE(it, src_files.end()) << rel;
    EXPECT_EQ(st.st_size, it->second.st_size) << rel;
    EXPECT_EQ(st.st_mode & 07777, 0444u) << rel;
    EXPECT_EQ(st.st_mtim.tv_sec, it->second.st_mtim.tv_sec) << rel;
  }
  for (const std::string& d : dirs) {
    struct stat st {};
    ASSERT_EQ(::stat((mp_ + "/" + d).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0555u) << d;
  }
}

TEST_F(MountTest, EveryByteEqualsTheSourceIncludingRangesAndConcurrentReaders) {
  MustMount(src_->path());
  ExpectAllBytesEqual(*tree_);
  // Random ranged reads of the multi-block files, and reads past EOF.
  std::mt19937_64 rng(7);
  for (const auto& [rel, data] : *tree_) {
    if (!rel.starts_with("big/")) continue;
    int fd = ::open((mp_ + "/" + rel).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::string buf(3 * kBlock, '\0');
    for (int i = 0; i < 50; ++i) {
      uint64_t off = rng() % data.size();
      size_t len = 1 + rng() % (2 * kBlock);
      ssize_t n = ::pread(fd, buf.data(), len, static_cast<off_t>(off));
      ASSERT_EQ(n, static_cast<ssize_t>(std::min<uint64_t>(len, data.size() - off)));
      ASSERT_EQ(0, std::memcmp(buf.data(), data.data() + off, static_cast<size_t>(n)))
          << rel << "@" << off;
    }
    EXPECT_EQ(::pread(fd, buf.data(), 100, static_cast<off_t>(data.size())), 0);
    EXPECT_EQ(::pread(fd, buf.data(), 100, static_cast<off_t>(data.size() + kBlock)), 0);
    ::close(fd);
  }
  // 16 concurrent readers, over the same files and over different files.
  std::vector<std::string> keys;
  for (const auto& [rel, data] : *tree_) keys.push_back(rel);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      for (size_t i = t % 2 == 0 ? 0 : t; i < keys.size(); i += (t % 2 == 0 ? 1 : 16)) {
        std::string got;
        if (!ReadWhole(mp_ + "/" + keys[i], &got) || got != tree_->at(keys[i])) ++mismatches;
      }
    });
  }
  for (auto& th : readers) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(MountTest, WritesCreatesRenamesAndDeletesFailWithErofs) {
  MustMount(src_->path());
  const std::string file = mp_ + "/top.txt";
  EXPECT_LT(::open(file.c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_LT(::open((mp_ + "/new.txt").c_str(), O_CREAT | O_WRONLY, 0644), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::rename(file.c_str(), (mp_ + "/moved.txt").c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::unlink(file.c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::mkdir((mp_ + "/d").c_str(), 0755), 0);
  EXPECT_EQ(errno, EROFS);
  std::string got;
  ASSERT_TRUE(ReadWhole(src_->path() + "/top.txt", &got));
  EXPECT_EQ(got, "hello");
  EXPECT_FALSE(fs::exists(src_->path() + "/new.txt"));
}

TEST_F(MountTest, WarmRemountIsServedByPassthroughWithZeroOriginReads) {
  MustMount(src_->path(), {"--read-mode", "passthrough"});
  ExpectAllBytesEqual(*tree_);
  nlohmann::json cold = UmountStats();
  ASSERT_TRUE(cold.is_object() && cold.contains("engine")) << cold.dump();
  EXPECT_GT(cold["engine"]["origin_requests"].get<uint64_t>(), 0u);
  EXPECT_EQ(cold["fuse"]["read_mode"], "passthrough");

  MustMount(src_->path(), {"--read-mode", "passthrough"});
  ExpectAllBytesEqual(*tree_);
  nlohmann::json warm = UmountStats();
  ASSERT_TRUE(warm.contains("engine")) << warm.dump();
  EXPECT_EQ(warm["engine"]["origin_requests"].get<uint64_t>(), 0u) << warm.dump();
  if (warm["fuse"]["passthrough"].get<bool>()) {
    EXPECT_GE(warm["fuse"]["passthrough_opens"].get<uint64_t>(), tree_->size() - 1) << warm.dump();
  } else {
    GTEST_LOG_(INFO) << "passthrough unavailable: " << warm["fuse"]["passthrough_note"];
  }

  MustMount(src_->path(), {"--read-mode", "passthrough", "--passthrough", "off"});
  ExpectAllBytesEqual(*tree_);
  nlohmann::json off = UmountStats();
  EXPECT_EQ(off["fuse"]["passthrough_opens"].get<uint64_t>(), 0u);
  EXPECT_EQ(off["engine"]["origin_requests"].get<uint64_t>(), 0u);
}

// --read-mode auto (the default): a dataset that fits in half of the memory
// gets the cached mode (no OPEN, no passthrough); one that does not, or
// `--passthrough on`, gets passthrough. Same bytes either way.
TEST_F(MountTest, AutoReadModeFollowsTheDatasetSize) {
  MustMount(src_->path());
  ExpectAllBytesEqual(*tree_);
  nlohmann::json small = UmountStats();
  EXPECT_EQ(small["fuse"]["read_mode"], "cached") << small.dump();
  EXPECT_EQ(small["fuse"]["passthrough_opens"].get<uint64_t>(), 0u);

  MustMount(src_->path(), {"--auto-cached-max", "1"});
  ExpectAllBytesEqual(*tree_);
  nlohmann::json large = UmountStats();
  EXPECT_EQ(large["fuse"]["read_mode"], "passthrough") << large.dump();
}

// Without a mount holder (--no-restart) the mount dies with its daemon.
// (tests/integration/restart covers the holder that restarts a killed daemon.)
TEST_F(MountTest, KilledDaemonIsCleanedUpByUmountAndRemountIsWarm) {
  MustMount(src_->path());
  ExpectAllBytesEqual(*tree_);
  UmountStats();  // clean stop: every admission is in the index
  MustMount(src_->path(), {"--no-restart"});
  auto pid = ReadPidFile(RunDir(), mp_);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  ASSERT_EQ(::kill(pid->pid, SIGKILL), 0);
  ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(IsMountpoint(mp_));
  MustMount(src_->path());
  ExpectAllBytesEqual(*tree_);
  nlohmann::json warm = UmountStats();
  EXPECT_EQ(warm["engine"]["origin_requests"].get<uint64_t>(), 0u) << warm.dump();
}

TEST_F(MountTest, BadInputsGiveOneErrorLineAndMountNothing) {
  ProcessResult r = RunGranary({"mount", src_->path(), work_.path() + "/nope", "--cache-dir",
                                CacheDir(), "--run-dir", RunDir()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(testing::IsErrorLine(r.err, "mount " + work_.path() + "/nope", "does not exist"))
      << r.err;

  work_.Write("mnt/occupied", "x");
  r = Mount(src_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(testing::IsErrorLine(r.err, "mount " + mp_, "not empty")) << r.err;
  EXPECT_FALSE(IsMountpoint(mp_));
  fs::remove(mp_ + "/occupied");

  r = Mount(work_.path() + "/no-such-source");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no objects under"), std::string::npos) << r.err;
  EXPECT_FALSE(IsMountpoint(mp_));

  MustMount(src_->path());
  r = Mount(src_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(testing::IsErrorLine(r.err, "mount " + mp_, "already")) << r.err;
  UmountStats();

  r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(testing::IsErrorLine(r.err, "umount " + mp_, "not mounted")) << r.err;
}

TEST_F(MountTest, UmountWhileReadersAreActiveGivesErrorsNotHangs) {
  MustMount(src_->path());
  std::vector<std::string> keys;
  for (const auto& [rel, data] : *tree_) keys.push_back(rel);
  std::atomic<bool> stop{false};
  std::latch reading(8);
  std::vector<std::future<void>> readers;
  for (int t = 0; t < 8; ++t) {
    readers.push_back(std::async(std::launch::async, [&, t] {
      bool counted = false;
      for (size_t i = t; !stop.load(); i = (i + 8) % keys.size()) {
        std::string got;
        bool ok = ReadWhole(mp_ + "/" + keys[i], &got);
        if (!counted) {
          reading.count_down();
          counted = true;
        }
        if (!ok) return;  // the mount went away: an error, not a hang
      }
    }));
  }
  reading.wait();
  ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (auto& f : readers) {
    EXPECT_EQ(f.wait_until(deadline), std::future_status::ready) << "a reader hung after umount";
  }
  stop = true;
  EXPECT_FALSE(IsMountpoint(mp_));
}

TEST_F(MountTest, CachedReadModeAndMemoryTierServeTheSameBytes) {
  MustMount(src_->path(), {"--read-mode", "cached", "--mem-cache", "64MiB"});
  ExpectAllBytesEqual(*tree_);
  ExpectAllBytesEqual(*tree_);  // repeat epoch: from the page cache / store
  nlohmann::json st = UmountStats();
  ASSERT_TRUE(st.contains("store")) << st.dump();
  ASSERT_EQ(st["store"]["tiers"].size(), 2u) << st.dump();
  EXPECT_EQ(st["store"]["tiers"][0]["medium"], "MEM") << st.dump();
  EXPECT_GT(st["store"]["tiers"][0]["files"].get<uint64_t>(), 0u) << st.dump();
  EXPECT_EQ(st["fuse"]["passthrough_opens"].get<uint64_t>(), 0u);
  fs::remove_all("/dev/shm/granary-" + st["dataset_id"].get<std::string>());
}

// Restores a sysfs parameter on destruction.
class SysfsOverride {
 public:
  SysfsOverride(std::string path, const std::string& value) : path_(std::move(path)) {
    std::ifstream in(path_);
    std::getline(in, old_);
    std::ofstream out(path_);
    out << value;
    ok_ = static_cast<bool>(out.flush());
  }
  ~SysfsOverride() {
    std::ofstream out(path_);
    out << old_;
  }
  bool ok() const { return ok_; }

 private:
  std::string path_;
  std::string old_;
  bool ok_ = false;
};

TEST_F(MountTest, IoUringTransportServesTheSameBytes) {
  const std::string param = "/sys/module/fuse/parameters/enable_uring";
  if (::access(param.c_str(), F_OK) != 0) GTEST_SKIP() << "kernel has no FUSE over io_uring";
  SysfsOverride enable(param, "Y");
  if (!enable.ok()) GTEST_SKIP() << "cannot set " << param << " to Y";
  MustMount(src_->path(), {"--fuse-transport", "uring"});
  ExpectAllBytesEqual(*tree_);
  nlohmann::json st = UmountStats();
  EXPECT_EQ(st["fuse"]["transport"], "uring") << st.dump();
  EXPECT_GT(st["fuse"]["uring_requests"].get<uint64_t>(),
            st["fuse"]["requests"].get<uint64_t>() / 2);
}

// The same checks over S3 (moto_server), smaller to keep uploads quick.
class S3MountTest : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    if (IsSkipped()) return;
    auto bucket = testing::StartMotoBucket("bucket");
    ASSERT_TRUE(bucket.ok()) << bucket.status().ToString();
    moto_ = std::move(bucket->server);
    S3Ufs* s3 = bucket->s3;
    s3_tree_ = MakeTree(400, 2, 2);
    for (const auto& [rel, data] : s3_tree_)
      ASSERT_TRUE(s3->PutObject("ds/" + rel, data).ok()) << rel;
  }
  void TearDown() override {
    MountTest::TearDown();  // unmount before moto goes away
    moto_.reset();
  }
  std::unique_ptr<testing::MotoServer> moto_;
  Tree s3_tree_;
};

TEST_F(S3MountTest, TreeAndBytesEqualTheBucketAndWarmRemountReadsNothing) {
  MustMount("s3://bucket/ds", {"--endpoint", moto_->endpoint()});
  std::map<std::string, struct stat> files;
  std::vector<std::string> dirs;
  Walk(mp_, "", &files, &dirs);
  ASSERT_EQ(files.size(), s3_tree_.size());
  for (const auto& [rel, st] : files) {
    ASSERT_EQ(s3_tree_.count(rel), 1u) << rel;
    EXPECT_EQ(static_cast<size_t>(st.st_size), s3_tree_.at(rel).size()) << rel;
  }
  ExpectAllBytesEqual(s3_tree_);
  UmountStats();
  MustMount("s3://bucket/ds", {"--endpoint", moto_->endpoint()});
  ExpectAllBytesEqual(s3_tree_);
  nlohmann::json warm = UmountStats();
  EXPECT_EQ(warm["engine"]["origin_requests"].get<uint64_t>(), 0u) << warm.dump();
}

TEST_F(S3MountTest, MissingBucketIsRefusedBeforeMounting) {
  ProcessResult r = Mount("s3://no-such-bucket/ds", {"--endpoint", moto_->endpoint()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(testing::Lines(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(r.err.starts_with("granary: mount " + mp_ + ": ")) << r.err;
  EXPECT_FALSE(IsMountpoint(mp_));
}

// A TCP proxy on loopback in front of moto_server that can be switched to
// stall: it then keeps accepting connections and reading requests but never
// answers (an origin that accepts and never answers), on new and
// kept-alive connections alike.
class StallProxy {
 public:
  explicit StallProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listen_fd_, 64), 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~StallProxy() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (auto& t : pipes_) t.join();
    ::close(listen_fd_);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Stall() { stall_ = true; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{.fd = listen_fd_, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard lock(mu_);
      pipes_.emplace_back([this, c] { Pipe(c); });
    }
  }
  void Pipe(int client) {
    int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(up);
      up = -1;
    }
    char buf[1 << 16];
    while (!stop_) {
      pollfd p[2] = {{.fd = client, .events = POLLIN, .revents = 0},
                     {.fd = up, .events = POLLIN, .revents = 0}};
      if (::poll(p, up >= 0 ? 2 : 1, 100) <= 0) continue;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if (p[i].revents == 0) continue;
        ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          closed = true;
          break;
        }
        if (stall_ || up < 0) continue;  // swallowed: no answer ever
        int to = i == 0 ? up : client;
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
          if (w <= 0) break;
          off += w;
        }
      }
      if (closed && !stall_) break;
      if (closed) {
        // In stall mode the client's socket stays open (until stop).
        while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    ::close(client);
    if (up >= 0) ::close(up);
  }

  const int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stall_{false};
  std::thread acceptor_;
  std::mutex mu_;  // guards pipes_
  std::vector<std::thread> pipes_;
};

// An S3 origin that stalls (accepts, never answers) behind a real
// mount with --origin-timeout 3s and 4 transport threads.
class StalledOriginTest : public MountTest {
 protected:
  void SetUp() override {
    MountTest::SetUp();
    if (IsSkipped()) return;
    auto bucket = testing::StartMotoBucket("bucket");
    ASSERT_TRUE(bucket.ok()) << bucket.status().ToString();
    moto_ = std::move(bucket->server);
    S3Ufs* s3 = bucket->s3;
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(
          s3->PutObject("stall/hot/h" + std::to_string(i), std::string(5000 + i, 'h')).ok());
    }
    for (int i = 0; i < 12; ++i) {
      ASSERT_TRUE(s3->PutObject("stall/cold/c" + std::to_string(i), std::string(7000, 'c')).ok());
    }
    proxy_ = std::make_unique<StallProxy>(moto_->port());
  }
  void TearDown() override {
    MountTest::TearDown();  // unmount before the origin goes away
    proxy_.reset();
    moto_.reset();
  }
  // The stalled-origin checks (a)-(c) on a mount with `extra` flags.
  void CheckStalledOrigin(std::vector<std::string> extra);
  // Reads `rel` through the mount; errno of the failure, 0 on success.
  int ReadErrno(const std::string& rel) {
    std::string got;
    return ReadWhole(mp_ + "/" + rel, &got) ? 0 : errno;
  }
  std::unique_ptr<testing::MotoServer> moto_;
  std::unique_ptr<StallProxy> proxy_;
};

TEST_F(StalledOriginTest, ColdReadsFailInTimeCachedFilesStayServedAndUmountIsQuick) {
  // 4 transport threads (Mount()); 6 stuck readers in CheckStalledOrigin.
  CheckStalledOrigin({});
}

// The same over FUSE-over-io_uring: a READ that must wait leaves its ring
// entry to a read waiter, whose reply the ring's thread commits later; the
// queue's other entries keep serving (8 per CPU queue; 6 stuck readers).
TEST_F(StalledOriginTest, OverIoUringWaitingReadsDoNotHoldTheRingThread) {
  const std::string param = "/sys/module/fuse/parameters/enable_uring";
  if (::access(param.c_str(), F_OK) != 0) GTEST_SKIP() << "kernel has no FUSE over io_uring";
  SysfsOverride enable(param, "Y");
  if (!enable.ok()) GTEST_SKIP() << "cannot set " << param << " to Y";
  CheckStalledOrigin({"--fuse-transport", "uring"});
}

void StalledOriginTest::CheckStalledOrigin(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--endpoint",  proxy_->endpoint(), "--origin-timeout", "3s",
                                   "--read-mode", "passthrough",      "--passthrough",    "off"};
  args.insert(args.end(), extra.begin(), extra.end());
  MustMount("s3://bucket/stall", args);
  ASSERT_FALSE(HasFatalFailure());
  ProcessResult load = RunGranary({"load", "--run-dir", RunDir(), "--quiet", mp_ + "/hot"});
  ASSERT_EQ(load.exit_code, 0) << load.err;
  proxy_->Stall();

  // (a) A cold read fails with EIO after about the timeout, not never.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadErrno("cold/c0"), EIO);
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(2500));
  EXPECT_LT(waited, std::chrono::seconds(60));

  // (b) With more cold readers stuck than there are transport threads,
  // listing, stat and reads of cached files are answered before any of
  // the stuck reads gives up.
  std::vector<std::future<int>> stuck;
  for (int i = 1; i <= 6; ++i) {
    stuck.push_back(std::async(std::launch::async,
                               [this, i] { return ReadErrno("cold/c" + std::to_string(i)); }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let them reach the daemon
  std::map<std::string, struct stat> files;
  std::vector<std::string> dirs;
  Walk(mp_, "", &files, &dirs);
  EXPECT_EQ(files.size(), 14u);
  for (int i = 0; i < 2; ++i) {
    std::string path = mp_ + "/hot/h" + std::to_string(i);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // the read reaches the daemon
    ::close(fd);
    std::string got;
    ASSERT_TRUE(ReadWhole(path, &got)) << std::strerror(errno);
    EXPECT_EQ(got, std::string(5000 + i, 'h'));
  }
  for (auto& f : stuck) {
    EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "a stuck read ended before the cached files were served";
  }
  for (auto& f : stuck) EXPECT_EQ(f.get(), EIO);

  // (c) umount returns within seconds while readers are stuck.
  stuck.clear();
  for (int i = 7; i <= 10; ++i) {
    stuck.push_back(std::async(std::launch::async,
                               [this, i] { return ReadErrno("cold/c" + std::to_string(i)); }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  t0 = std::chrono::steady_clock::now();
  ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  for (auto& f : stuck) EXPECT_NE(f.get(), 0);
  EXPECT_FALSE(IsMountpoint(mp_));
}

// A stand-in for a hung NFS server: a FUSE mount (served by this process)
// of a small tree whose file reads block until Release().
class HangingDirFs : public DirFs {
 public:
  using DirFs::DirFs;
  Result<size_t> Read(uint64_t, uint64_t, uint64_t, std::span<char>) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return released_; });
    return Unavailable("released");
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// A POSIX origin whose reads hang (NFS server gone): a read
// through Granary fails with EIO after --origin-timeout, and umount is quick.
TEST_F(MountTest, HungPosixOriginFailsReadsWithEioInTime) {
  TempDir tree;
  tree.Write("f.bin", std::string(4096, 'x'));
  const std::string nfs = work_.path() + "/nfs";
  fs::create_directories(nfs);
  HangingDirFs hanging(DirFsOptions{.root = tree.path(), .offer_backing = false});
  FuseOptions o;
  o.mountpoint = nfs;
  o.passthrough = FusePassthrough::kOff;
  o.dir_prefetch = false;
  FuseServer server(&hanging, o);
  ASSERT_TRUE(server.Start().ok());
  MustMount(nfs, {"--origin-timeout", "3s"});
  auto t0 = std::chrono::steady_clock::now();
  std::string got;
  EXPECT_FALSE(ReadWhole(mp_ + "/f.bin", &got));
  EXPECT_EQ(errno, EIO);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  t0 = std::chrono::steady_clock::now();
  ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  hanging.Release();
  server.Stop();
}

}  // namespace
}  // namespace granary
