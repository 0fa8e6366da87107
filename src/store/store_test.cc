// Unit tests of the store: admission, reads, restart, tiers, eviction.
#include "store/store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "store/store_test_util.h"

namespace granary {
namespace {

using testing_util::MakeData;
using testing_util::TempDir;

TEST(StoreTest, AdmitReadRestart) {
  TempDir dir;
  StoreOptions opt{.tiers = {TierLevel{.medium = Medium::kSsd, .path = dir.path() + "/ssd",
                                       .quota = 64ull << 20}},
                   .block_size = 1 << 20,
                   .background = false};
  std::string small = MakeData(110'000, 1);
  std::string large = MakeData(3'500'000, 2);
  ObjectKey ks{.dataset = "d", .key = "a.jpg", .etag = "e1", .size = small.size()};
  ObjectKey kl{.dataset = "d", .key = "big.bin", .etag = "e1", .size = large.size()};
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_FALSE((*store)->Contains(ks));
    std::string buf(200'000, '\0');
    EXPECT_EQ((*store)->Read(ks, 0, std::span(buf)).status().code(), Code::kNotFound);
    ASSERT_TRUE((*store)->AdmitObject(ks, small).value());
    ASSERT_TRUE((*store)->AdmitBlock(kl, 1, std::string_view(large).substr(1 << 20, 1 << 20)).value());
    EXPECT_FALSE((*store)->Contains(kl));
    EXPECT_TRUE((*store)->ContainsRange(kl, (1 << 20) + 5, 1000));
    EXPECT_FALSE((*store)->ContainsRange(kl, (1 << 20) - 5, 1000));
    auto n = (*store)->Read(ks, 0, std::span(buf));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, small.size());
    EXPECT_EQ(buf.substr(0, *n), small);
    auto st = (*store)->stats();
    EXPECT_EQ(st.tiers[0].files, 2u);
    EXPECT_EQ(st.tiers[0].used_bytes, 110'000u / 4096 * 4096 + 4096 + (1u << 20));
  }
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->Contains(ks));
  EXPECT_TRUE((*store)->ContainsRange(kl, (1 << 20), 1 << 20));
  std::string buf(1000, '\0');
  auto n = (*store)->Read(kl, (1 << 20) + 77, std::span(buf));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(buf, large.substr((1 << 20) + 77, 1000));
  ASSERT_TRUE((*store)->AdmitObject(kl, large).value());
  EXPECT_TRUE((*store)->Contains(kl));
  auto fd = (*store)->OpenCompleteFile(kl);
  ASSERT_TRUE(fd.ok());
  std::string whole(large.size(), '\0');
  EXPECT_EQ(::pread(*fd, whole.data(), whole.size(), 0), static_cast<ssize_t>(large.size()));
  ::close(*fd);
  EXPECT_EQ(whole, large);
  EXPECT_EQ((*store)->stats().recovered_objects, 2u);
}

}  // namespace
}  // namespace granary
