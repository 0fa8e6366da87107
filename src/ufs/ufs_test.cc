#include "ufs/ufs.h"

#include <gtest/gtest.h>

#include "testing/mem_ufs.h"

namespace granary {
namespace {

TEST(UnderStorage, ListAllFindsEveryObjectAcrossPrefixesInOrder) {
  testing::MemUfs ufs;
  std::vector<std::string> want;
  for (int d = 0; d < 40; ++d) {
    for (int f = 0; f < 30; ++f) {
      std::string key = "data/train/d" + std::to_string(d) + "/f" + std::to_string(f) + ".jpg";
      ufs.Put(key, std::string(d + f, 'x'));
      want.push_back(key);
    }
  }
  ufs.Put("data/train_list.txt", "list");
  want.push_back("data/train_list.txt");
  ufs.Put("other/x", "not in prefix");
  std::sort(want.begin(), want.end());
  auto all = ufs.ListAll("data/", 8);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*all)[i].key, want[i]);
  EXPECT_GT(ufs.stats().list_requests, 40u);  // went wide across the class folders
}

TEST(UnderStorage, ListPagingWithSmallPages) {
  testing::MemUfs ufs;
  for (int i = 0; i < 25; ++i) ufs.Put("k" + std::to_string(100 + i), "v");
  ListRequest req{.prefix = "k", .max_keys = 7};
  int pages = 0;
  size_t total = 0;
  do {
    auto page = ufs.List(req);
    ASSERT_TRUE(page.ok());
    total += page->objects.size();
    req.continuation_token = page->next_token;
    ++pages;
  } while (!req.continuation_token.empty());
  EXPECT_EQ(total, 25u);
  EXPECT_EQ(pages, 4);
  EXPECT_FALSE(ufs.List(ListRequest{.max_keys = 0}).ok());
}

TEST(UnderStorage, ReadCountsBytesAndErrors) {
  testing::MemUfs ufs;
  ufs.Put("a", "hello world");
  auto r = ufs.ReadRange("a", 6, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "world");
  EXPECT_EQ(ufs.ReadRange("a", 50, 10)->size(), 0u);
  auto missing = ufs.ReadRange("nope", 0, 1);
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  auto s = ufs.stats();
  EXPECT_EQ(s.read_requests, 3u);
  EXPECT_EQ(s.read_bytes, 5u);
  EXPECT_EQ(s.errors, 1u);
}

TEST(UnderStorage, ListAllPropagatesErrors) {
  class BrokenList : public testing::MemUfs {
   protected:
    Result<ListPage> ListImpl(const ListRequest& r) override {
      if (r.prefix == "x/b/") return Unavailable("origin down");
      return MemUfs::ListImpl(r);
    }
  } ufs;
  ufs.Put("x/a/1", "1");
  ufs.Put("x/b/1", "1");
  auto all = ufs.ListAll("x/", 4);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace granary
