// The mount outlives its daemon: `granary mount` leaves a mount holder that
// keeps the FUSE connection, restarts a killed daemon and hands the
// connection to a new binary on `granary mount --upgrade`
// (docs/reliability.md, "Daemon restarts and upgrades").
//
// Real mounts of a moto_server bucket through the built binary. Sixteen
// readers read an epoch while the daemon is killed (-9) or upgraded, with
// descriptors opened and a file mmap'ed before the event and read after it:
// every read must succeed with the exact bytes; the longest time one read
// took is reported (test property longest_read_ms). A crash loop ends served
// or given up (readers get an error, nothing hangs); `granary umount` works
// with the daemon dead, restarting, or orphaned by a killed holder.
//
// Needs root and /dev/fuse (skipped otherwise). Every mount is undone by
// TearDown (granary umount, then a lazy unmount) also when a test fails.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli_runner.h"
#include "daemon/daemon.h"
#include "daemon/holder_channel.h"
#include "fuse/fuse_server.h"
#include "moto_bucket.h"
#include "ufs/s3_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::RunGranary;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

using Tree = std::map<std::string, std::string>;  // key under ds/ -> bytes

constexpr int kReaders = 16;

// What the readers saw.
struct ReadReport {
  uint64_t reads = 0;
  uint64_t failed = 0;      // open/read errors
  uint64_t mismatched = 0;  // wrong bytes
  double longest_ms = 0;    // the slowest whole-file read
  std::vector<std::string> first_errors;
};

// kReaders threads reading every file of a tree, whole, in a shuffled order,
// `epochs` times (or until Stop()). WaitForReads() blocks until a number of
// reads completed, so an event can be placed mid-epoch without a sleep.
class EpochReaders {
 public:
  EpochReaders(std::string mp, const Tree& tree, int epochs) : mp_(std::move(mp)), tree_(tree) {
    for (const auto& [rel, data] : tree) keys_.push_back(rel);
    running_ = kReaders;  // before they start: WaitForReads must not see 0 running
    for (int t = 0; t < kReaders; ++t) {
      threads_.emplace_back([this, t, epochs] { Run(t, epochs); });
    }
  }
  ~EpochReaders() { Join(); }

  // Waits until `n` reads have completed (or the readers ended).
  void WaitForReads(uint64_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return report_.reads >= n || running_ == 0; });
  }
  void Stop() { stop_.store(true); }
  uint64_t reads() {
    std::lock_guard lock(mu_);
    return report_.reads;
  }
  ReadReport Join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    std::lock_guard lock(mu_);
    return report_;
  }

 private:
  void Run(int t, int epochs) {
    std::vector<std::string> order = keys_;
    std::mt19937 rng(static_cast<uint32_t>(t));
    std::vector<char> buf(1 << 16);
    for (int e = 0; (epochs == 0 || e < epochs) && !stop_.load(); ++e) {
      std::shuffle(order.begin(), order.end(), rng);
      // Each reader reads its share of the epoch (every key once overall).
      for (size_t i = static_cast<size_t>(t); i < order.size() && !stop_.load(); i += kReaders) {
        const std::string& rel = order[i];
        const auto start = Clock::now();
        std::string got;
        int err = 0;
        const int fd = ::open((mp_ + "/" + rel).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) err = errno;
        while (fd >= 0) {
          const ssize_t n = ::read(fd, buf.data(), buf.size());
          if (n < 0) err = errno;
          if (n <= 0) break;
          got.append(buf.data(), static_cast<size_t>(n));
        }
        if (fd >= 0) ::close(fd);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        std::lock_guard lock(mu_);
        ++report_.reads;
        report_.longest_ms = std::max(report_.longest_ms, ms);
        if (err != 0) {
          ++report_.failed;
          if (report_.first_errors.size() < 5)
            report_.first_errors.push_back(rel + ": " + std::strerror(err));
        } else if (got != tree_.at(rel)) {
          ++report_.mismatched;
          if (report_.first_errors.size() < 5)
            report_.first_errors.push_back(rel + ": wrong bytes");
        }
        cv_.notify_all();
      }
    }
    std::lock_guard lock(mu_);
    --running_;
    cv_.notify_all();
  }

  const std::string mp_;
  const Tree& tree_;
  std::vector<std::string> keys_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards report_, running_
  std::condition_variable cv_;
  ReadReport report_;
  int running_ = 0;
  std::vector<std::thread> threads_;
};

// Descriptors opened, and a big file mapped, before an event; Check() reads
// them all after it.
class OpenedBefore {
 public:
  OpenedBefore(const std::string& mp, const Tree& tree) : tree_(tree) {
    for (const auto& [rel, data] : tree) {
      if (rel.starts_with("big/")) {
        map_rel_ = rel;
        map_fd_ = ::open((mp + "/" + rel).c_str(), O_RDONLY | O_CLOEXEC);
        if (map_fd_ >= 0) {
          map_ = ::mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, map_fd_, 0);
        }
      } else if (fds_.size() < 8) {
        fds_.emplace_back(rel, ::open((mp + "/" + rel).c_str(), O_RDONLY | O_CLOEXEC));
      }
    }
  }
  ~OpenedBefore() {
    for (auto& [rel, fd] : fds_) {
      if (fd >= 0) ::close(fd);
    }
    if (map_ != MAP_FAILED && map_ != nullptr) ::munmap(map_, tree_.at(map_rel_).size());
    if (map_fd_ >= 0) ::close(map_fd_);
  }
  bool opened() const {
    bool ok = map_fd_ >= 0 && map_ != MAP_FAILED && map_ != nullptr && !fds_.empty();
    for (const auto& [rel, fd] : fds_) ok = ok && fd >= 0;
    return ok;
  }
  // Every byte through the old descriptors (pread) and the mapping.
  void Check() const {
    for (const auto& [rel, fd] : fds_) {
      const std::string& want = tree_.at(rel);
      std::string got(want.size(), '\0');
      ASSERT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(want.size()))
          << rel << ": " << std::strerror(errno);
      EXPECT_TRUE(got == want) << rel;
    }
    const std::string& want = tree_.at(map_rel_);
    EXPECT_EQ(std::memcmp(map_, want.data(), want.size()), 0) << map_rel_ << " (mmap)";
  }

 private:
  const Tree& tree_;
  std::vector<std::pair<std::string, int>> fds_;
  std::string map_rel_;
  int map_fd_ = -1;
  void* map_ = MAP_FAILED;
};

class RestartTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0) return;
    auto bucket = testing::StartMotoBucket("restart");
    ASSERT_TRUE(bucket.ok()) << bucket.status().ToString();
    moto_ = bucket->server.release();
    tree_ = new Tree;
    std::mt19937 rng(11);
    for (int i = 0; i < 320; ++i) {
      (*tree_)["train/c" + std::to_string(i % 8) + "/img" + std::to_string(i) + ".jpg"] =
          testing::RandomBytes(4096 + rng() % 60000, 100 + i);
    }
    (*tree_)["big/shard0.bin"] = testing::RandomBytes((3 << 20) + 4321, 7);
    for (const auto& [rel, data] : *tree_) {
      ASSERT_TRUE(bucket->s3->PutObject("ds/" + rel, data).ok()) << rel;
    }
  }
  static void TearDownTestSuite() {
    delete moto_;
    delete tree_;
    moto_ = nullptr;
    tree_ = nullptr;
  }
  void SetUp() override {
    if (moto_ == nullptr) GTEST_SKIP() << "needs root and /dev/fuse";
    mp_ = work_.path() + "/mnt";
    fs::create_directories(mp_);
  }
  void TearDown() override {
    if (moto_ == nullptr) return;
    if (HasFailure()) PrintDaemonLogs();
    if (IsMountpoint(mp_)) {
      RunGranary({"umount", "--run-dir", RunDir(), mp_});
      if (IsMountpoint(mp_)) UnmountFuse(mp_).IgnoreError();
    }
  }

  std::string RunDir() const { return work_.path() + "/run"; }
  // A failed test's daemon logs (the holder's and every daemon's), for the
  // CI output: the mount's temp dir is gone after the test.
  void PrintDaemonLogs() const {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(RunDir(), ec)) {
      if (entry.path().extension() != ".log") continue;
      std::ifstream in(entry.path());
      std::cout << "---- " << entry.path().filename().string() << " ----\n"
                << in.rdbuf() << "---- end ----" << std::endl;
    }
  }

  void MustMount(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"mount",
                                     "s3://restart/ds",
                                     mp_,
                                     "--endpoint",
                                     moto_->endpoint(),
                                     "--cache-dir",
                                     work_.path() + "/cache:1G",
                                     "--block-size",
                                     "1MiB",
                                     "--run-dir",
                                     RunDir(),
                                     "--fuse-threads",
                                     "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    ProcessResult r = RunGranary(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(IsMountpoint(mp_));
  }
  nlohmann::json HolderStatus() {
    Result<nlohmann::json> st =
        AskMountHolder(RunDir(), mp_, {{"op", "status"}}, std::chrono::seconds(10));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? *st : nlohmann::json::object();
  }
  // Polls the holder (another process) until a daemon other than `old` runs
  // (and serves, when `serving`). 0 when none did within 20 s.
  pid_t WaitForDaemon(pid_t old, bool serving) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      Result<nlohmann::json> st =
          AskMountHolder(RunDir(), mp_, {{"op", "status"}}, std::chrono::seconds(10));
      if (!st.ok()) return 0;
      const pid_t pid = st->value("daemon_pid", 0);
      if (pid > 0 && pid != old && (!serving || st->value("serving", false))) return pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return 0;
  }
  // granary umount: exits 0 and leaves neither a mount nor a holder.
  void ExpectCleanUmount() {
    Result<DaemonPidInfo> holder = ReadPidFile(RunDir(), mp_);
    ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(IsMountpoint(mp_));
    if (holder.ok()) {
      // The holder exits once its daemon did; it is not our child: poll.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (PidFileProcessAlive(*holder) && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      EXPECT_FALSE(PidFileProcessAlive(*holder)) << "holder pid " << holder->pid << " still runs";
    }
    EXPECT_FALSE(fs::exists(HolderSocketPath(RunDir(), mp_)));
  }
  void Report(const ReadReport& r, const std::string& what) {
    RecordProperty("longest_read_ms", static_cast<int>(r.longest_ms));
    std::cout << what << ": " << r.reads << " reads, " << r.failed << " failed, " << r.mismatched
              << " wrong, longest read " << static_cast<int>(r.longest_ms) << " ms" << std::endl;
    EXPECT_EQ(r.failed, 0u) << ::testing::PrintToString(r.first_errors);
    EXPECT_EQ(r.mismatched, 0u) << ::testing::PrintToString(r.first_errors);
  }
  // Kill -9 of the daemon a quarter into a cold epoch of 16 readers.
  void KillMidEpoch(const std::vector<std::string>& extra) {
    MustMount(extra);
    OpenedBefore before(mp_, *tree_);
    ASSERT_TRUE(before.opened());
    const pid_t first = HolderStatus().value("daemon_pid", 0);
    ASSERT_GT(first, 0);
    EpochReaders readers(mp_, *tree_, /*epochs=*/2);
    readers.WaitForReads(tree_->size() / 4);
    ASSERT_EQ(::kill(first, SIGKILL), 0);
    before.Check();  // blocks until the next daemon serves them
    ReadReport r = readers.Join();
    Report(r, "kill -9 mid-epoch");
    EXPECT_EQ(r.reads, 2 * tree_->size());
    nlohmann::json st = HolderStatus();
    EXPECT_NE(st.value("daemon_pid", 0), first);
    EXPECT_EQ(st.value("restarts", 0), 1) << st.dump();
    std::cout << "daemon down for " << st.value("last_takeover_ms", -1) << " ms" << std::endl;
    ExpectCleanUmount();
  }

  static testing::MotoServer* moto_;
  static Tree* tree_;
  TempDir work_;
  std::string mp_;
};

testing::MotoServer* RestartTest::moto_ = nullptr;
Tree* RestartTest::tree_ = nullptr;

TEST_F(RestartTest, KillNineMidEpochFailsNoReadInCachedMode) {
  KillMidEpoch({"--read-mode", "cached"});
}

TEST_F(RestartTest, KillNineMidEpochFailsNoReadInPassthroughMode) {
  KillMidEpoch({"--read-mode", "passthrough"});
}

TEST_F(RestartTest, UpgradeToAnotherBinaryMidEpochFailsNoRead) {
  const std::string next = work_.path() + "/granary-next";
  fs::copy_file(GRANARY_CLI_PATH, next);
  fs::permissions(next, fs::perms::owner_all);
  MustMount({"--read-mode", "passthrough"});
  OpenedBefore before(mp_, *tree_);
  ASSERT_TRUE(before.opened());
  const pid_t first = HolderStatus().value("daemon_pid", 0);
  EpochReaders readers(mp_, *tree_, /*epochs=*/2);
  readers.WaitForReads(tree_->size() / 4);
  ProcessResult up =
      RunGranary({"mount", "--upgrade", mp_, "--binary", next, "--run-dir", RunDir()});
  EXPECT_EQ(up.exit_code, 0) << up.err;
  EXPECT_NE(up.out.find("upgraded"), std::string::npos) << up.out;
  before.Check();
  ReadReport r = readers.Join();
  Report(r, "upgrade mid-epoch");
  nlohmann::json st = HolderStatus();
  const pid_t now = st.value("daemon_pid", 0);
  EXPECT_NE(now, first);
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(now) + "/exe", ec), fs::path(next));

  // A binary that does not exist is refused; the mount keeps being served.
  ProcessResult bad = RunGranary(
      {"mount", "--upgrade", mp_, "--binary", work_.path() + "/none", "--run-dir", RunDir()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(testing::IsErrorLine(bad.err, "mount --upgrade " + mp_, "does not exist")) << bad.err;
  EXPECT_EQ(HolderStatus().value("daemon_pid", 0), now);
  ExpectCleanUmount();
}

// An upgrade to a binary that cannot serve (it exits at once) is reported as
// failed, and the previous binary serves the mount again: readers see a
// pause, not an error.
TEST_F(RestartTest, AnUpgradeToABrokenBinaryFallsBackWithoutAFailedRead) {
  const std::string broken = work_.path() + "/granary-broken";
  {
    std::ofstream out(broken);
    out << "#!/bin/sh\nexit 3\n";
  }
  fs::permissions(broken, fs::perms::owner_all);
  MustMount({"--read-mode", "passthrough"});
  const pid_t first = HolderStatus().value("daemon_pid", 0);
  EpochReaders readers(mp_, *tree_, /*epochs=*/2);
  readers.WaitForReads(tree_->size() / 4);
  ProcessResult up =
      RunGranary({"mount", "--upgrade", mp_, "--binary", broken, "--run-dir", RunDir()});
  EXPECT_EQ(up.exit_code, 1);
  EXPECT_TRUE(testing::IsErrorLine(up.err, "mount --upgrade " + mp_, "serves it again")) << up.err;
  Report(readers.Join(), "upgrade to a broken binary");
  const pid_t now = WaitForDaemon(first, /*serving=*/true);
  ASSERT_GT(now, 0);
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(now) + "/exe", ec),
            fs::path(GRANARY_CLI_PATH));
  ExpectCleanUmount();
}

// A daemon that fails after it mounted (here: its metrics port is taken)
// makes `granary mount` fail with its error, and nothing stays mounted.
TEST_F(RestartTest, ADaemonFailingAfterItMountedFailsTheMountAndLeavesNothing) {
  const int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}};
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  ProcessResult r = RunGranary({"mount", "s3://restart/ds", mp_, "--endpoint", moto_->endpoint(),
                                "--cache-dir", work_.path() + "/cache:1G", "--run-dir", RunDir(),
                                "--metrics-addr", "127.0.0.1:" + port});
  ::close(taken);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(testing::IsErrorLine(r.err, "mount " + mp_, "in use")) << r.err;
  EXPECT_FALSE(IsMountpoint(mp_));
  EXPECT_FALSE(ReadPidFile(RunDir(), mp_).ok());
  EXPECT_FALSE(fs::exists(HolderSocketPath(RunDir(), mp_)));
}

// A READ the daemon had taken (waiting for a stopped origin) when it was
// killed is resent by the kernel to the next daemon and answered in full.
TEST_F(RestartTest, AReadTheKilledDaemonHadTakenIsAnsweredByTheNextOne) {
  MustMount({"--read-mode", "cached"});
  const std::string rel = "big/shard0.bin";
  const pid_t first = HolderStatus().value("daemon_pid", 0);
  ASSERT_EQ(::kill(moto_->pid(), SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{moto_->pid()};
  auto reader = std::async(std::launch::async, [&] {
    std::string got;
    const int fd = ::open((mp_ + "/" + rel).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::string("open: ") + std::strerror(errno);
    got.resize(tree_->at(rel).size());
    const ssize_t n = ::pread(fd, got.data(), got.size(), 0);
    const int err = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(got.size())) return std::string("read: ") + std::strerror(err);
    return got == tree_->at(rel) ? std::string("ok") : std::string("wrong bytes");
  });
  // The daemon has the READ once a read waiter took it (its stats file,
  // written on SIGUSR1, says so).
  const std::string stats = RunFilePath(RunDir(), mp_, "stats.json");
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  uint64_t deferred = 0;
  while (deferred == 0 && Clock::now() < deadline) {
    ::kill(first, SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(stats);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("fuse")) deferred = j["fuse"].value("reads_deferred", 0);
  }
  ASSERT_GT(deferred, 0u) << "the daemon never took the READ";
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_EQ(::kill(moto_->pid(), SIGCONT), 0);
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(reader.get(), "ok");
  const pid_t second = WaitForDaemon(first, /*serving=*/true);
  ASSERT_GT(second, 0);
  ExpectCleanUmount();
  std::ifstream in(stats);
  nlohmann::json last = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(last.is_object() && last.contains("fuse"));
  EXPECT_EQ(last.value("pid", 0), second);
  EXPECT_GE(last["fuse"].value("requests_resent", 0), 1) << last["fuse"].dump();
}

// The origin stalls (stopped), then the daemon is killed: the next one
// starts from the snapshot and cache on disk without asking the origin, and
// a warm epoch is read in full while the origin is still stopped.
TEST_F(RestartTest, ADaemonKilledWhileTheOriginStallsIsReplacedAndServesTheWarmCache) {
  MustMount({"--read-mode", "passthrough"});
  Report(EpochReaders(mp_, *tree_, /*epochs=*/1).Join(), "cold epoch");
  const pid_t first = HolderStatus().value("daemon_pid", 0);
  ASSERT_EQ(::kill(moto_->pid(), SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{moto_->pid()};
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  auto warm = std::async(std::launch::async,
                         [&] { return EpochReaders(mp_, *tree_, /*epochs=*/1).Join(); });
  ASSERT_EQ(warm.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the warm epoch waits for the stopped origin";
  Report(warm.get(), "warm epoch, origin stopped, daemon killed");
  EXPECT_NE(HolderStatus().value("daemon_pid", 0), first);
  ::kill(moto_->pid(), SIGCONT);
  ExpectCleanUmount();
}

// After a `granary sync` the kernel holds node ids of the new snapshot
// version; a restarted daemon keeps numbering them the same way, so
// descriptors and names resolve to the same files.
TEST_F(RestartTest, NodeIdsOfASyncedVersionNameTheSameFilesAfterARestart) {
  MustMount({"--read-mode", "passthrough"});
  const std::string fresh = testing::RandomBytes(70000, 99);
  {
    Result<std::unique_ptr<UnderStorage>> ufs = NewS3Ufs(
        *ParseUri("s3://restart"), UfsOptions{.options = {{"endpoint", moto_->endpoint()}}});
    ASSERT_TRUE(ufs.ok());
    ASSERT_TRUE(dynamic_cast<S3Ufs*>(ufs->get())->PutObject("ds/added.bin", fresh).ok());
  }
  ProcessResult sync = RunGranary({"sync", mp_, "--run-dir", RunDir()});
  ASSERT_EQ(sync.exit_code, 0) << sync.err;
  const std::string old_rel = "train/c1/img1.jpg";
  const int added = ::open((mp_ + "/added.bin").c_str(), O_RDONLY | O_CLOEXEC);
  const int kept = ::open((mp_ + "/" + old_rel).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(added, 0) << std::strerror(errno);
  ASSERT_GE(kept, 0) << std::strerror(errno);
  const pid_t first = HolderStatus().value("daemon_pid", 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_GT(WaitForDaemon(first, /*serving=*/true), 0);
  std::string got(fresh.size(), '\0');
  EXPECT_EQ(::pread(added, got.data(), got.size(), 0), static_cast<ssize_t>(fresh.size()));
  EXPECT_TRUE(got == fresh);
  const std::string& want = tree_->at(old_rel);
  got.assign(want.size(), '\0');
  EXPECT_EQ(::pread(kept, got.data(), got.size(), 0), static_cast<ssize_t>(want.size()));
  EXPECT_TRUE(got == want);
  struct stat st {};
  ASSERT_EQ(::stat((mp_ + "/added.bin").c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), fresh.size());
  ::close(added);
  ::close(kept);
  ExpectCleanUmount();
}

// A writable mount: a writer appends a line and fsyncs it, line after line,
// while the daemon is killed, and 16 readers read the epoch meanwhile. No
// write, fsync, close or read fails; the origin ends with every line.
TEST_F(RestartTest, AnAppendingWriterWithFsyncKeepsWritingAcrossAKill) {
  MustMount({"--writable"});
  EpochReaders readers(mp_, *tree_, /*epochs=*/1);
  ASSERT_EQ(::mkdir((mp_ + "/logs").c_str(), 0755), 0) << std::strerror(errno);
  const int fd =
      ::open((mp_ + "/logs/train.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string expected;
  std::vector<std::string> failures;
  auto append = [&](int step) {
    const std::string line =
        "step " + std::to_string(step) + " loss " + std::to_string(1.0 / (step + 1)) + "\n";
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      failures.push_back("write " + std::to_string(step) + ": " + std::strerror(errno));
      return;
    }
    expected += line;
    if (::fsync(fd) != 0)
      failures.push_back("fsync " + std::to_string(step) + ": " + std::strerror(errno));
  };
  for (int step = 0; step < 20; ++step) append(step);
  const pid_t first = HolderStatus().value("daemon_pid", 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  for (int step = 20; step < 40; ++step) append(step);  // the first waits for the next daemon
  if (::close(fd) != 0) failures.push_back(std::string("close: ") + std::strerror(errno));
  EXPECT_TRUE(failures.empty()) << ::testing::PrintToString(failures);
  Report(readers.Join(), "reads beside a writer across kill -9");
  std::string through_mount;
  {
    std::ifstream in(mp_ + "/logs/train.log");
    std::stringstream text;
    text << in.rdbuf();
    through_mount = text.str();
  }
  EXPECT_EQ(through_mount, expected);
  Result<std::unique_ptr<UnderStorage>> ufs =
      NewS3Ufs(*ParseUri("s3://restart"), UfsOptions{.options = {{"endpoint", moto_->endpoint()}}});
  ASSERT_TRUE(ufs.ok());
  Result<std::string> at_origin = (*ufs)->ReadRange("ds/logs/train.log", 0, expected.size() + 1);
  ASSERT_TRUE(at_origin.ok()) << at_origin.status().ToString();
  EXPECT_EQ(*at_origin, expected);
  ExpectCleanUmount();
}

// Killed again while it recovers, three times: the fourth daemon serves, and
// the readers never saw an error.
TEST_F(RestartTest, DaemonsKilledDuringTheirRecoveryEndInAServedMount) {
  MustMount();
  EpochReaders readers(mp_, *tree_, /*epochs=*/0);
  readers.WaitForReads(50);
  pid_t pid = HolderStatus().value("daemon_pid", 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    pid = WaitForDaemon(pid, /*serving=*/false);
    ASSERT_GT(pid, 0) << "no daemon started after kill " << i + 1;
  }
  ASSERT_GT(WaitForDaemon(0, /*serving=*/true), 0);
  readers.WaitForReads(readers.reads() + 200);  // served by the last daemon
  readers.Stop();
  Report(readers.Join(), "crash loop of 3");
  ExpectCleanUmount();
}

// A daemon that keeps dying at once is given up: the connection is aborted,
// so readers get an error instead of hanging, and nothing stays mounted.
TEST_F(RestartTest, AFastCrashLoopIsGivenUpWithErrorsNotHangs) {
  MustMount();
  std::atomic<int> errors{0};
  std::atomic<bool> stop{false};
  auto reader = std::async(std::launch::async, [&] {
    while (!stop.load() && errors.load() == 0) {
      std::string got;
      const int fd = ::open((mp_ + "/train/c0/img0.jpg").c_str(), O_RDONLY | O_CLOEXEC);
      char buf[4096];
      if (fd < 0 || ::read(fd, buf, sizeof buf) < 0) ++errors;
      if (fd >= 0) ::close(fd);
    }
  });
  pid_t pid = HolderStatus().value("daemon_pid", 0);
  Result<DaemonPidInfo> holder = ReadPidFile(RunDir(), mp_);
  ASSERT_TRUE(holder.ok());
  for (int i = 0; i < 8 && pid > 0; ++i) {
    ::kill(pid, SIGKILL);
    pid = WaitForDaemon(pid, /*serving=*/false);
  }
  // The holder gave up (it no longer answers) and left no mount behind.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (PidFileProcessAlive(*holder) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(PidFileProcessAlive(*holder));
  EXPECT_FALSE(IsMountpoint(mp_));
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "a reader hangs on the given-up mount";
  stop.store(true);
  EXPECT_GT(errors.load(), 0);
  ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(testing::IsErrorLine(r.err, "umount " + mp_, "not mounted")) << r.err;
}

// A container killed with SIGKILL (or OOM) takes the holder and the daemon
// with it and leaves a dead mount (ENOTCONN) behind: the next `granary mount`
// on that mount point detaches it and serves, instead of refusing until
// someone unmounts by hand on the node.
TEST_F(RestartTest, TheNextMountReplacesAMountWhoseHolderAndDaemonWereKilled) {
  MustMount();
  const pid_t daemon = HolderStatus().value("daemon_pid", 0);
  Result<DaemonPidInfo> holder = ReadPidFile(RunDir(), mp_);
  ASSERT_TRUE(holder.ok());
  ASSERT_GT(daemon, 0);
  ASSERT_EQ(::kill(holder->pid, SIGKILL), 0);
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  // The kernel ends the connection once the daemon's descriptors are closed.
  auto dead = [&] {
    struct statfs st {};
    return ::statfs(mp_.c_str(), &st) != 0 && errno == ENOTCONN;
  };
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!dead() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // another process exiting
  }
  ASSERT_TRUE(dead()) << "the killed mount still answers";
  MustMount();
  EpochReaders readers(mp_, *tree_, /*epochs=*/1);
  Report(readers.Join(), "reads on the mount that replaced the dead one");
  ExpectCleanUmount();
}

TEST_F(RestartTest, UmountWorksWhileTheDaemonIsDeadOrOrphaned) {
  // Right after a kill -9, while the next daemon starts.
  MustMount();
  ASSERT_EQ(::kill(HolderStatus().value("daemon_pid", 0), SIGKILL), 0);
  ExpectCleanUmount();

  // The holder killed: its daemon keeps serving, and umount stops it.
  MustMount();
  const pid_t daemon = HolderStatus().value("daemon_pid", 0);
  const DaemonPidInfo daemon_info{.pid = daemon, .start_ticks = ProcessStartTicks(daemon)};
  Result<DaemonPidInfo> holder = ReadPidFile(RunDir(), mp_);
  ASSERT_TRUE(holder.ok());
  ASSERT_EQ(::kill(holder->pid, SIGKILL), 0);
  EpochReaders readers(mp_, *tree_, /*epochs=*/1);
  Report(readers.Join(), "reads with the holder killed");
  ProcessResult r = RunGranary({"umount", "--run-dir", RunDir(), mp_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(IsMountpoint(mp_));
  EXPECT_FALSE(PidFileProcessAlive(daemon_info));
}

}  // namespace
}  // namespace granary
