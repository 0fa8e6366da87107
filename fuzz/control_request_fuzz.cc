// libFuzzer target: arbitrary bytes as one request line of the daemon's control ops
// (ParseControlRequest: JSON, version, op, the fields of a load). Checks
// that no exception escapes (nlohmann's type errors must become a Status),
// that nothing reads out of bounds or overflows (ASan, UBSan; a float "threads"
// once converted out of range), and that a parsed load's thread count lies in
// -1..kMaxLoadThreads+1 as the loader expects.
//
// Built only with GRANARY_FUZZ=ON and clang; run by scripts/fuzz.sh on
// fuzz/corpus/control_request_fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "control/control_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace granary;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto req = ParseControlRequest(in);
  if (req.ok()) {
    if (req->load.threads < -1 || req->load.threads > kMaxLoadThreads + 1) std::abort();
  } else if (req.status().message().empty()) {
    std::abort();  // the error reply must say something
  }
  return 0;
}
