// Pid files: after a kill -9 and pid reuse, `granary umount` must
// not signal the unrelated process that now has the daemon's pid. And the read
// mode `--read-mode auto` picks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/daemon.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

// A child running `sleep 60`, killed on destruction.
struct Sleeper {
  pid_t pid = -1;
  Sleeper() {
    pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Sleeper() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  bool Running() const { return ::waitpid(pid, nullptr, WNOHANG) == 0; }
};

class PidFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("granary-pid-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A pid file for mount point mp_ naming `pid` (and `start` when given).
  void WritePidFile(pid_t pid, std::optional<uint64_t> start) {
    std::ofstream out(RunFilePath(dir_.string(), mp_, "pid"));
    out << pid << "\n" << mp_ << "\ns3://bucket/x\n";
    if (start) out << *start << "\n";
  }
  fs::path dir_;
  const std::string mp_ = "/nonexistent/granary-pid-test-mnt";
};

TEST_F(PidFileTest, StartTimeIsReadFromProc) {
  EXPECT_GT(ProcessStartTicks(::getpid()), 0u);
  EXPECT_EQ(ProcessStartTicks(0), 0u);
  EXPECT_EQ(ProcessStartTicks(999'999'999), 0u);
}

TEST_F(PidFileTest, ReusedPidIsNeverSignalled) {
  Sleeper other;  // stands for the process that got the dead daemon's pid
  ASSERT_GT(other.pid, 0);
  // Until the child has exec'd sleep (a forked child still runs this program).
  const std::string exe = "/proc/" + std::to_string(other.pid) + "/exe";
  for (int i = 0; i < 200; ++i) {
    std::error_code ec;
    if (fs::read_symlink(exe, ec).filename() == "sleep") break;
    ::usleep(10'000);  // polling another process's exec
  }
  const uint64_t start = ProcessStartTicks(other.pid);
  ASSERT_GT(start, 0u);

  // The pid file recorded another start time: not our daemon.
  WritePidFile(other.pid, start + 1);
  auto info = ReadPidFile(dir_.string(), mp_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->start_ticks, start + 1);
  EXPECT_FALSE(PidFileProcessAlive(*info));
  EXPECT_TRUE(StopDaemon(dir_.string(), mp_, std::chrono::seconds(2)).ok());
  EXPECT_TRUE(other.Running()) << "umount signalled an unrelated process";
  EXPECT_FALSE(fs::exists(RunFilePath(dir_.string(), mp_, "pid"))) << "stale pid file kept";

  // An old pid file without a start time: the program must be granary's.
  WritePidFile(other.pid, std::nullopt);
  info = ReadPidFile(dir_.string(), mp_);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(PidFileProcessAlive(*info));  // /bin/sleep, not this program
  EXPECT_TRUE(StopDaemon(dir_.string(), mp_, std::chrono::seconds(2)).ok());
  EXPECT_TRUE(other.Running());

  // The right start time: that process is the one the file names.
  EXPECT_TRUE(PidFileProcessAlive(DaemonPidInfo{.pid = other.pid, .start_ticks = start}));
}

// --read-mode auto: cached mode for a dataset up to the machine's
// memory (measured to lead up to 1.5x the page cache), passthrough beyond it
// (measured to lead at 3x) or whenever --passthrough on requires it; an
// explicit --auto-cached-max replaces the memory as the limit.
TEST(AutoReadModeTest, CachedUpToThePhysicalMemoryPassthroughBeyond) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  const uint64_t memory = 24 * kGiB;
  // Half of the memory: what the old default still gave cached mode.
  EXPECT_EQ(AutoReadMode(12 * kGiB, 0, memory, false), FuseReadMode::kCached);
  // Between half and all of the memory: cached now (was passthrough).
  EXPECT_EQ(AutoReadMode(20 * kGiB, 0, memory, false), FuseReadMode::kCached);
  EXPECT_EQ(AutoReadMode(memory, 0, memory, false), FuseReadMode::kCached);
  EXPECT_EQ(AutoReadMode(memory + 1, 0, memory, false), FuseReadMode::kPassthrough);
  EXPECT_EQ(AutoReadMode(3 * memory, 0, memory, false), FuseReadMode::kPassthrough);
  // --passthrough on wins over the size.
  EXPECT_EQ(AutoReadMode(kGiB, 0, memory, true), FuseReadMode::kPassthrough);
  // --auto-cached-max replaces the memory as the limit, either way.
  EXPECT_EQ(AutoReadMode(2 * kGiB, kGiB, memory, false), FuseReadMode::kPassthrough);
  EXPECT_EQ(AutoReadMode(30 * kGiB, 32 * kGiB, memory, false), FuseReadMode::kCached);
}

}  // namespace
}  // namespace granary
