// libFuzzer target: arbitrary bytes as the body of a failed S3
// request (ParseS3Error, the <Error> document whose Code and Message end up in
// errors and retry decisions). Checks that nothing reads out of bounds or
// overflows (ASan, UBSan) and that a body that is not XML yields no code.
//
// Built only with GRANARY_FUZZ=ON and clang; run by scripts/fuzz.sh on
// fuzz/corpus/s3_error_fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ufs/s3_list_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  granary::S3ErrorDocument e = granary::ParseS3Error(in);
  if (in.empty() && (!e.code.empty() || !e.message.empty())) std::abort();
  return 0;
}
