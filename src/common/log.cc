#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <regex>

namespace granary {

Status SetLogLevel(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (lvl == spdlog::level::off && level != "off") {
    return InvalidArgument("log level: unknown value '" + std::string(level) +
                           "' (expected trace, debug, info, warn, error or off)");
  }
  spdlog::set_level(lvl);
  return Status::Ok();
}

void InitLogging() {
  static bool done = [] {
    auto logger = spdlog::stderr_color_mt("granary");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e %^%l%$] %v");
    spdlog::set_level(spdlog::level::info);
    return true;
  }();
  (void)done;
}

std::string RedactSecrets(std::string_view text) {
  static const std::regex kSecretPair(
      R"(((?:[A-Za-z0-9_.-]*(?:signature|credential|secret|token|password|authorization|accesskey)[A-Za-z0-9_.-]*)\s*[=:]\s*)([^&\s,;]+))",
      std::regex::icase);
  return std::regex_replace(std::string(text), kSecretPair, "$1***");
}

}  // namespace granary
