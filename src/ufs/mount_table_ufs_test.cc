// MountTableUfs: several sources under one tree, listed, statted and read
// through their paths.
#include "ufs/mount_table_ufs.h"

#include <gtest/gtest.h>

#include "testing/mem_ufs.h"

namespace granary {
namespace {

using testing::MemUfs;

struct Tree {
  std::shared_ptr<MemUfs> a = std::make_shared<MemUfs>("mem://a");
  std::shared_ptr<MemUfs> b = std::make_shared<MemUfs>("mem://b");
  std::unique_ptr<MountTableUfs> table;

  Tree() {
    a->Put("data/train/x.jpg", "xx");
    a->Put("data/train/y.jpg", "yyy");
    a->Put("other/z", "not shown");
    b->Put("v/1.jpg", "1");
    b->Put("v/sub/2.jpg", "22");
    auto t = MountTableUfs::Make("fluid://default/ds",
                                 {UfsMount{.path = "val", .ufs = b, .prefix = ""},
                                  UfsMount{.path = "imagenet", .ufs = a, .prefix = "data/"}});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    table = std::move(*t);
  }
};

std::vector<std::string> Keys(const std::vector<ObjectInfo>& objects) {
  std::vector<std::string> out;
  for (const ObjectInfo& o : objects) out.push_back(o.key);
  return out;
}

TEST(MountTableUfsTest, RecursiveListingShowsEveryMountUnderItsPath) {
  Tree t;
  auto all = t.table->ListAll("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(Keys(*all), (std::vector<std::string>{"imagenet/train/x.jpg", "imagenet/train/y.jpg",
                                                  "val/v/1.jpg", "val/v/sub/2.jpg"}));
  EXPECT_EQ((*all)[1].size, 3u);
  auto sub = t.table->ListAll("imagenet/train/");
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub->size(), 2u);
}

TEST(MountTableUfsTest, DelimitedListingOfTheRootNamesTheMounts) {
  Tree t;
  auto page = t.table->List(ListRequest{.prefix = "", .delimiter = "/"});
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->objects.empty());
  EXPECT_EQ(page->common_prefixes, (std::vector<std::string>{"imagenet/", "val/"}));
  EXPECT_TRUE(page->next_token.empty());
  auto inside = t.table->List(ListRequest{.prefix = "val/v/", .delimiter = "/"});
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(Keys(inside->objects), (std::vector<std::string>{"val/v/1.jpg"}));
  EXPECT_EQ(inside->common_prefixes, (std::vector<std::string>{"val/v/sub/"}));
}

TEST(MountTableUfsTest, PagesContinueAcrossMounts) {
  Tree t;
  std::vector<std::string> keys;
  std::string token;
  int pages = 0;
  do {
    auto page =
        t.table->List(ListRequest{.prefix = "", .continuation_token = token, .max_keys = 1});
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const ObjectInfo& o : page->objects) keys.push_back(o.key);
    token = page->next_token;
    ASSERT_LT(++pages, 20);
  } while (!token.empty());
  EXPECT_EQ(keys.size(), 4u);
  auto bad = t.table->List(ListRequest{.prefix = "", .continuation_token = "x"});
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
}

TEST(MountTableUfsTest, StatAndReadGoToTheMountHoldingTheKey) {
  Tree t;
  auto st = t.table->Stat("imagenet/train/y.jpg");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->key, "imagenet/train/y.jpg");
  EXPECT_EQ(st->size, 3u);
  auto bytes = t.table->ReadRange("val/v/sub/2.jpg", 0, 2);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, "22");
  // Outside every mount, and the mount's prefix cannot be escaped.
  EXPECT_EQ(t.table->Stat("other/z").status().code(), Code::kNotFound);
  EXPECT_EQ(t.table->Stat("imagenet").status().code(), Code::kNotFound);
}

TEST(MountTableUfsTest, SetMountsSwapsTheTreeAndRefusesOverlaps) {
  Tree t;
  ASSERT_TRUE(t.table->SetMounts({UfsMount{.path = "val", .ufs = t.b, .prefix = ""}}).ok());
  auto all = t.table->ListAll("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  EXPECT_EQ(t.table->Stat("imagenet/train/x.jpg").status().code(), Code::kNotFound);

  EXPECT_EQ(
      t.table->SetMounts({UfsMount{.path = "a", .ufs = t.a}, UfsMount{.path = "a/b", .ufs = t.b}})
          .code(),
      Code::kInvalidArgument);
  EXPECT_EQ(
      t.table->SetMounts({UfsMount{.path = "", .ufs = t.a}, UfsMount{.path = "b", .ufs = t.b}})
          .code(),
      Code::kInvalidArgument);
  EXPECT_EQ(t.table->SetMounts({UfsMount{.path = "a", .ufs = t.a, .prefix = "data"}}).code(),
            Code::kInvalidArgument);
  // A refused table leaves the previous one in place.
  EXPECT_TRUE(t.table->Stat("val/v/1.jpg").ok());
}

TEST(MountTableUfsTest, ARootMountIsTheWholeTree) {
  auto a = std::make_shared<MemUfs>("mem://a");
  a->Put("p/k1", "1");
  a->Put("p/d/k2", "2");
  auto t = MountTableUfs::Make("fluid://x/y", {UfsMount{.path = "", .ufs = a, .prefix = "p/"}});
  ASSERT_TRUE(t.ok());
  auto all = (*t)->ListAll("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Keys(*all), (std::vector<std::string>{"d/k2", "k1"}));
  EXPECT_TRUE((*t)->Stat("d/k2").ok());
}

}  // namespace
}  // namespace granary
