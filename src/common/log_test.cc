// Tests of the log: the per-call-site rate limit and the capped, private log file
//.
#include "common/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "testing/fake_clock.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

// Captures log lines ("%v" only) on a fake clock; restores logging at the end.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("log-test", sink);
    logger->set_pattern("%v");
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
    SetLogClock(&clock_);
  }
  void TearDown() override {
    SetLogClock(nullptr);
    spdlog::set_default_logger(saved_);
  }

  // The captured lines so far (and forgets them).
  std::vector<std::string> TakeLines() {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    out_.str("");
    return lines;
  }

  std::shared_ptr<spdlog::logger> saved_;
  std::ostringstream out_;
  testing::FakeClock clock_;
};

// One call site, as in a read path that fails for every block.
void WarnReadFailed(int i) { GLOG_WARN("read of block {} failed: disk error", i); }

TEST_F(LogTest, RepeatedWarningsAreRateLimitedAndCounted) {
  for (int i = 0; i < 1000; ++i) WarnReadFailed(i);
  std::vector<std::string> lines = TakeLines();
  ASSERT_EQ(lines.size(), kLogBurst);
  EXPECT_EQ(lines.front(), "read of block 0 failed: disk error");
  EXPECT_EQ(lines.back(), "read of block " + std::to_string(kLogBurst - 1) + " failed: disk error");

  // Still inside the window: nothing.
  clock_.Advance(kLogWindow / 2);
  WarnReadFailed(1000);
  EXPECT_TRUE(TakeLines().empty());

  // The window has passed: the count of what was dropped, then the line.
  clock_.Advance(kLogWindow);
  WarnReadFailed(1001);
  lines = TakeLines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "(" + std::to_string(1001 - kLogBurst) +
                          " similar messages suppressed: \"read of block {} failed: disk error\")");
  EXPECT_EQ(lines[1], "read of block 1001 failed: disk error");
}

TEST_F(LogTest, DistinctMessagesAreNotSuppressed) {
  for (int i = 0; i < 1000; ++i) WarnReadFailed(i);  // this site is over its limit
  TakeLines();
  for (int i = 0; i < 5; ++i) {
    GLOG_WARN("origin slow: {}", i);
    GLOG_ERROR("checkpoint failed: {}", i);
    GLOG_INFO("mounted {}", i);
  }
  const std::vector<std::string> lines = TakeLines();
  ASSERT_EQ(lines.size(), 15u);
  EXPECT_EQ(lines[0], "origin slow: 0");
  EXPECT_EQ(lines[1], "checkpoint failed: 0");
  EXPECT_EQ(lines[14], "mounted 4");
}

TEST_F(LogTest, LinesBelowTheLevelAreNotCounted) {
  spdlog::set_level(spdlog::level::err);
  for (int i = 0; i < 100; ++i) GLOG_WARN("hidden {}", i);
  spdlog::set_level(spdlog::level::info);
  EXPECT_TRUE(TakeLines().empty());
}

TEST_F(LogTest, LogFileIsPrivateAndCapped) {
  std::string tmpl = (fs::temp_directory_path() / "granary-log-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string path = tmpl + "/daemon.log";
  const mode_t old_umask = ::umask(022);
  ASSERT_TRUE(LogToFile(path, 4096, 1).ok());
  const std::string line(100, 'x');
  for (int i = 0; i < 500; ++i) spdlog::warn("{} {}", i, line);  // ~50 KB, unlimited sink calls
  spdlog::set_default_logger(saved_);  // the file logger goes: closes the file
  ::umask(old_umask);

  uint64_t total = 0;
  for (const std::string& p : {path, tmpl + "/daemon.1.log"}) {
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
    EXPECT_LE(static_cast<uint64_t>(st.st_size), 4096u) << p;
    total += static_cast<uint64_t>(st.st_size);
  }
  EXPECT_GT(total, 4096u);
  EXPECT_FALSE(fs::exists(tmpl + "/daemon.2.log")) << "one rotated file is kept";
  fs::remove_all(tmpl);
}

}  // namespace
}  // namespace granary
