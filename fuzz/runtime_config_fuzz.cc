// libFuzzer target: Fluid's runtime.json parser (scripts/fuzz.sh). Any input
// must give a FluidRuntime or an error with a one-line message, never a
// crash, a hang or an exception. Secret files the input names are read if
// they exist (the parser's contract); nothing is written.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fluid/runtime_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto rt = granary::fluid::ParseRuntimeConfig(text, "fuzz.json");
  if (!rt.ok()) {
    if (rt.status().message().find('\n') != std::string::npos) std::abort();
    return 0;
  }
  if (rt->mounts.empty()) std::abort();  // the parser requires at least one
  for (const auto& m : rt->mounts) {
    if (m.path.starts_with("/") || m.path.ends_with("/")) std::abort();
  }
  return 0;
}
