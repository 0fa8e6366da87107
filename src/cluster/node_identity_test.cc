// NodeIdentity: a node's id survives on its disk and a new disk is a new node.
#include "cluster/node_identity.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace granary::cluster {
namespace {

class NodeIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary-node-id-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(NodeIdentityTest, TheSameDiskGivesTheSameIdAndANewDiskANewOne) {
  auto first = LoadOrCreateNodeId(dir_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->size(), 32u);
  auto again = LoadOrCreateNodeId(dir_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  const std::string other_dir = dir_ + "/other";
  std::filesystem::create_directory(other_dir);
  auto other = LoadOrCreateNodeId(other_dir);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
}

TEST_F(NodeIdentityTest, ADamagedFileIsReplacedByAFreshId) {
  auto first = LoadOrCreateNodeId(dir_);
  ASSERT_TRUE(first.ok());
  std::string text = EncodeNodeIdFile(*first);
  text[20] = text[20] == 'a' ? 'b' : 'a';  // a digit of the id: the checksum no longer matches
  std::ofstream(dir_ + "/node-id") << text;
  auto next = LoadOrCreateNodeId(dir_);
  ASSERT_TRUE(next.ok());
  EXPECT_NE(*next, *first);
  EXPECT_EQ(*LoadOrCreateNodeId(dir_), *next);
}

TEST(NodeIdFileTest, DecodeValidatesEveryField) {
  const std::string id = "0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(DecodeNodeIdFile(EncodeNodeIdFile(id)).ok());
  EXPECT_EQ(*DecodeNodeIdFile(EncodeNodeIdFile(id)), id);
  EXPECT_EQ(DecodeNodeIdFile("").status().code(), Code::kCorruption);
  EXPECT_EQ(DecodeNodeIdFile("granary-node-id 2 " + id + " 0\n").status().code(),
            Code::kCorruption);
  EXPECT_EQ(DecodeNodeIdFile(EncodeNodeIdFile("XYZ")).status().code(), Code::kCorruption);
  EXPECT_EQ(DecodeNodeIdFile(EncodeNodeIdFile(id) + "more\n").status().code(), Code::kCorruption);
}

}  // namespace
}  // namespace granary::cluster
