#include "common/replace_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace granary {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ReplaceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("granary-replace-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(ReplaceFileTest, ReplacesTheWholeContentsAndLeavesNoTemporaryFile) {
  const std::string path = dir_ / "state.json";
  ASSERT_TRUE(ReplaceFileContents(path, "a much longer first version\n").ok());
  ASSERT_TRUE(ReplaceFileContents(path, "v2\n", {.durable = true, .mode = 0600}).ok());
  EXPECT_EQ(Slurp(path), "v2\n");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);  // created 0600
}

TEST_F(ReplaceFileTest, AFailureNamesTheFileAndKeepsTheOldContents) {
  const std::string path = dir_ / "meta";
  ASSERT_TRUE(ReplaceFileContents(path, "old").ok());
  // A directory where the file should go: the rename fails.
  const std::string blocked = dir_ / "blocked";
  std::filesystem::create_directories(blocked + "/inside");
  Status s = ReplaceFileContents(blocked, "new");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find(blocked), std::string::npos) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(blocked + ".tmp"));
  Status missing = ReplaceFileContents((dir_ / "no-such-dir" / "f").string(), "x");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.ToString().find("no-such-dir"), std::string::npos) << missing.ToString();
  EXPECT_EQ(Slurp(path), "old");
}

}  // namespace
}  // namespace granary
