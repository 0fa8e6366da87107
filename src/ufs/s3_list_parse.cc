// S3 ListObjectsV2, error document and Content-Length parsing (see s3_list_parse.h).
#include "ufs/s3_list_parse.h"

#include <charconv>
#include <cstdio>
#include <ctime>
#include <pugixml.hpp>

#include "common/log.h"

namespace granary {
namespace {

// Seconds since the epoch of "2009-10-12T17:50:30.000Z", as nanoseconds; 0 if unparsable.
int64_t ParseIso8601(const char* text) {
  std::tm tm{};
  int millis = 0;
  if (std::sscanf(text, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &millis) < 6) {
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1'000'000'000 + int64_t{millis} * 1'000'000;
}

}  // namespace

std::optional<uint64_t> ParseObjectSize(std::string_view text) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (ec != std::errc() || end != text.data() + text.size() || v > kMaxS3ObjectSize) {
    return std::nullopt;
  }
  return v;
}

std::string UnquoteEtag(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}

Result<ListPage> ParseListPage(std::string_view body, const std::string& what) {
  pugi::xml_document doc;
  auto parsed = doc.load_buffer(body.data(), body.size());
  auto root = doc.child("ListBucketResult");
  if (!parsed || !root) {
    return Unavailable(what + ": malformed ListObjectsV2 response (" +
                       std::string(parsed ? "no ListBucketResult" : parsed.description()) + ")");
  }
  ListPage page;
  std::string first_bad;  // "key (Size 'text')" of the first skipped entry
  for (auto c : root.children("Contents")) {
    std::optional<uint64_t> size = ParseObjectSize(c.child_value("Size"));
    if (!size) {
      if (page.skipped_entries++ == 0) {
        first_bad = "'" + std::string(c.child_value("Key")) + "' (Size '" +
                    std::string(c.child_value("Size")).substr(0, 40) + "')";
      }
      continue;
    }
    page.objects.push_back(ObjectInfo{
        .key = c.child_value("Key"),
        .size = *size,
        .mtime_ns = ParseIso8601(c.child_value("LastModified")),
        .etag = UnquoteEtag(c.child_value("ETag")),
    });
  }
  if (page.skipped_entries > 0) {
    GLOG_WARN(
        "{}: skipped {} listing entries with an invalid size (not a decimal number of at "
        "most 5 TiB), first {}",
        what, page.skipped_entries, first_bad);
  }
  for (auto p : root.children("CommonPrefixes")) {
    page.common_prefixes.emplace_back(p.child_value("Prefix"));
  }
  if (std::string_view(root.child_value("IsTruncated")) == "true") {
    page.next_token = root.child_value("NextContinuationToken");
    if (page.next_token.empty()) {
      return Unavailable(what + ": truncated listing without NextContinuationToken");
    }
  }
  return page;
}

S3ErrorDocument ParseS3Error(std::string_view body) {
  pugi::xml_document doc;
  if (body.empty() || !doc.load_buffer(body.data(), body.size())) return {};
  auto err = doc.child("Error");
  return {.code = err.child_value("Code"), .message = err.child_value("Message")};
}

}  // namespace granary
