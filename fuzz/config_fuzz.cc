// libFuzzer target: arbitrary bytes as the YAML config
// (ParseConfig, which also validates it). Checks that yaml-cpp's exceptions
// and every type mismatch become a Status (an escaping exception aborts), and
// that nothing reads out of bounds or overflows (ASan, UBSan). A config that
// parses must validate again and keep its tiers' limits.
//
// Built only with GRANARY_FUZZ=ON and clang; run by scripts/fuzz.sh on
// fuzz/corpus/config_fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto config = granary::ParseConfig(in, "fuzz.yaml");
  if (config.ok() && !config->Validate().ok()) std::abort();
  return 0;
}
