// Parsing of S3 response bodies and headers: the ListObjectsV2 page (XML), the
// <Error> document of a failed request, and the Content-Length of a HEAD.
// Split from s3_ufs.cc so that the parsers of outside input are tested (and
// fuzzed, fuzz/s3_list_fuzz.cc and fuzz/s3_error_fuzz.cc) without a server.
//
// Invariant: an ObjectInfo returned from here has a size that parsed fully as
// a decimal number and is at most kMaxS3ObjectSize; a listing entry that does
// not is skipped and counted in ListPage::skipped_entries (a huge
// size overflowed block counts and sized per-object arrays).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "granary/status.h"
#include "ufs/ufs.h"

namespace granary {

// S3's largest object: 5 TiB.
inline constexpr uint64_t kMaxS3ObjectSize = uint64_t{5} << 40;

// The size in `text` if it is a plain decimal number (digits only: no sign,
// space or suffix) of at most kMaxS3ObjectSize; nullopt otherwise.
std::optional<uint64_t> ParseObjectSize(std::string_view text);

// `s` without one pair of surrounding double quotes (S3 quotes ETags).
std::string UnquoteEtag(std::string s);

// One ListObjectsV2 page. Entries with an invalid Size are left out and
// counted in skipped_entries, with one warning per page naming the first such
// key. Unavailable (naming `what`) if the document is not a ListBucketResult,
// or is truncated without a continuation token.
Result<ListPage> ParseListPage(std::string_view body, const std::string& what);

// The fields of an S3 error document: <Error><Code>..</Code><Message>..</Message></Error>.
struct S3ErrorDocument {
  std::string code;     // e.g. "NoSuchKey"; "" when absent
  std::string message;  // human-readable text; "" when absent
};

// Code and Message of `body`; both "" when the body is empty, not XML, or has
// no <Error> root element.
S3ErrorDocument ParseS3Error(std::string_view body);

}  // namespace granary
