#include "common/mountinfo.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

TEST(MountinfoTest, ParsesPathsTypesAndSourcesWithEscapesAndOptionalFields) {
  const std::string text =
      "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "98 22 0:51 / /mnt/image\\040net rw,nosuid shared:7 master:2 - fuse.granary "
      "granary:s3://b/my\\040data rw,user_id=0\n"
      "garbage line\n"
      "99 22 0:52 / /tmp/no-optional rw - tmpfs tmpfs rw\n";
  std::vector<MountEntry> m = ParseMountinfo(text);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].mountpoint, "/");
  EXPECT_EQ(m[0].fstype, "ext4");
  EXPECT_EQ(m[0].source, "/dev/sda1");
  EXPECT_EQ(m[1].mountpoint, "/mnt/image net");
  EXPECT_EQ(m[1].fstype, "fuse.granary");
  EXPECT_EQ(m[1].source, "granary:s3://b/my data");
  EXPECT_EQ(m[2].mountpoint, "/tmp/no-optional");
  EXPECT_EQ(m[2].fstype, "tmpfs");
}

TEST(MountinfoTest, UnescapesOnlyThreeOctalDigits) {
  EXPECT_EQ(UnescapeMountinfo("a\\040b\\134c"), "a b\\c");
  EXPECT_EQ(UnescapeMountinfo("end\\04"), "end\\04");
  EXPECT_EQ(UnescapeMountinfo("x\\9zz"), "x\\9zz");
}

TEST(MountinfoTest, ThisProcessSeesItsRoot) {
  bool root = false;
  for (const MountEntry& e : ReadMountinfo()) root = root || e.mountpoint == "/";
  EXPECT_TRUE(root);
}

}  // namespace
}  // namespace granary
