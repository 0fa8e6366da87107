#include "granary/status.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

TEST(StatusMessage, StaysOneLineWhenItQuotesInputWithControlCharacters) {
  const Status s = InvalidArgument("mounts[0].mountPoint 'oss://a\nb\r\tc\x01': not a URI");
  EXPECT_EQ(s.message(), "mounts[0].mountPoint 'oss://a\\nb\\r\\tc\\x01': not a URI");
  EXPECT_EQ(s.WithContext("runtime.json\n").message(),
            "runtime.json\\n: mounts[0].mountPoint 'oss://a\\nb\\r\\tc\\x01': not a URI");
  EXPECT_EQ(NotFound("s3://b/k: no such key").message(), "s3://b/k: no such key");
}

}  // namespace
}  // namespace granary
