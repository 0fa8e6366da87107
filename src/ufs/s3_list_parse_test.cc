// S3 ListObjectsV2 / Content-Length parsing: sizes that are not plain decimal
// numbers of at most 5 TiB are skipped and counted, never taken.
#include "ufs/s3_list_parse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace granary {
namespace {

std::string Entry(const std::string& key, const std::string& size) {
  return "<Contents><Key>" + key +
         "</Key><LastModified>2024-01-02T03:04:05.000Z</LastModified>"
         "<ETag>\"e-" +
         key + "\"</ETag><Size>" + size + "</Size></Contents>";
}

std::string Page(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string xml = "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name>";
  for (const auto& [key, size] : entries) xml += Entry(key, size);
  return xml + "<IsTruncated>false</IsTruncated></ListBucketResult>";
}

const std::vector<std::pair<std::string, std::string>> kMixed = {
    {"ok/a", "0"},
    {"bad/negative", "-1"},
    {"bad/junk", "12abc"},
    {"ok/b", "12345"},
    {"bad/overflow", "99999999999999999999999"},
    {"bad/over-5tib", "6000000000000"},
    {"bad/empty", ""},
    {"bad/plus", "+5"},
    {"bad/space", " 7"},
    {"ok/max", "5497558138880"},  // exactly 5 TiB
};

TEST(S3ListParseTest, InvalidSizesAreSkippedAndCounted) {
  auto page = ParseListPage(Page(kMixed), "s3://b/");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 3u);
  EXPECT_EQ(page->objects[0].key, "ok/a");
  EXPECT_EQ(page->objects[0].size, 0u);
  EXPECT_EQ(page->objects[1].key, "ok/b");
  EXPECT_EQ(page->objects[1].size, 12345u);
  EXPECT_EQ(page->objects[1].etag, "e-ok/b");
  EXPECT_GT(page->objects[1].mtime_ns, 0);
  EXPECT_EQ(page->objects[2].size, kMaxS3ObjectSize);
  EXPECT_EQ(page->skipped_entries, 7u);
}

TEST(S3ListParseTest, ObjectSizeParsesFully) {
  EXPECT_EQ(ParseObjectSize("0"), 0u);
  EXPECT_EQ(ParseObjectSize("5497558138880"), kMaxS3ObjectSize);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "12abc", "0x10", "5497558138881",
                          "18446744073709551616", "99999999999999999999999"}) {
    EXPECT_EQ(ParseObjectSize(bad), std::nullopt) << "'" << bad << "'";
  }
}

// An origin answering one fixed page: UnderStorage::List counts what it skipped.
class FixedPageUfs : public UnderStorage {
 public:
  explicit FixedPageUfs(std::string body) : body_(std::move(body)) {}
  std::string Root() const override { return "s3://fixed"; }

 protected:
  Result<ListPage> ListImpl(const ListRequest&) override { return ParseListPage(body_, Root()); }
  Result<ObjectInfo> StatImpl(std::string_view) override { return NotFound("none"); }
  Result<size_t> ReadImpl(std::string_view, uint64_t, std::span<char>, std::string_view,
                          std::optional<uint64_t>*) override {
    return NotFound("none");
  }

 private:
  std::string body_;
};

TEST(S3ListParseTest, SkippedEntriesShowInUfsStats) {
  FixedPageUfs ufs(Page(kMixed));
  auto all = ufs.ListAll("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), 3u);
  EXPECT_EQ(ufs.stats().bad_list_entries, 7u);
  EXPECT_EQ(ufs.stats().errors, 0u);
}

TEST(S3ListParseTest, MalformedPagesAreUnavailable) {
  EXPECT_EQ(ParseListPage("<nope/>", "s3://b/").status().code(), Code::kUnavailable);
  EXPECT_EQ(ParseListPage("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
                          "s3://b/")
                .status()
                .code(),
            Code::kUnavailable);
}

TEST(S3ListParseTest, ErrorDocumentsGiveCodeAndMessageOrNothing) {
  S3ErrorDocument e = ParseS3Error("<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>");
  EXPECT_EQ(e.code, "NoSuchKey");
  EXPECT_EQ(e.message, "gone");
  for (std::string_view body : {"", "<html>502</html>", "<Error><Code>A", "\xff\xfe<"}) {
    S3ErrorDocument none = ParseS3Error(body);
    EXPECT_TRUE(none.code.empty() && none.message.empty()) << body;
  }
}

}  // namespace
}  // namespace granary
