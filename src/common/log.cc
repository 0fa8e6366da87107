#include "common/log.h"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
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

namespace {

constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e %^%l%$] %v";

std::atomic<Clock*> log_clock{nullptr};

}  // namespace

void InitLogging() {
  static bool done = [] {
    auto logger = spdlog::stderr_color_mt("granary");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern(kPattern);
    spdlog::set_level(spdlog::level::info);
    return true;
  }();
  (void)done;
}

Status LogToFile(const std::string& path, size_t max_bytes, size_t max_rotated) {
  spdlog::file_event_handlers private_file;
  private_file.after_open = [](const spdlog::filename_t&, std::FILE* f) {
    ::fchmod(::fileno(f), 0600);  // logs name datasets and paths: the daemon user's alone
  };
  std::shared_ptr<spdlog::sinks::rotating_file_sink_mt> sink;
  try {
    sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(path, max_bytes, max_rotated,
                                                                  false, private_file);
  } catch (const spdlog::spdlog_ex& e) {
    return IoError("log file " + path + ": " + e.what());
  }
  auto logger = std::make_shared<spdlog::logger>("granary-file", std::move(sink));
  logger->set_pattern(kPattern);
  logger->set_level(spdlog::default_logger()->level());
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

void SetLogClock(Clock* clock) { log_clock.store(clock, std::memory_order_release); }

namespace log_internal {

Admission Admit(SiteState& site) {
  Clock* clock = log_clock.load(std::memory_order_acquire);
  const Clock::TimePoint now = (clock != nullptr ? clock : Clock::Real())->Now();
  Admission a;
  MutexLock lock(site.mu);
  if (!site.started || now - site.window_start >= kLogWindow) {
    a.report_suppressed = site.suppressed;
    site.started = true;
    site.window_start = now;
    site.lines = 0;
    site.suppressed = 0;
  }
  if (site.lines < kLogBurst) {
    ++site.lines;
    a.write = true;
  } else {
    ++site.suppressed;
  }
  return a;
}

void LogSuppressed(spdlog::level::level_enum level, uint64_t count, std::string_view format) {
  spdlog::log(level, "({} similar messages suppressed: \"{}\")", count, format);
}

}  // namespace log_internal

std::string RedactSecrets(std::string_view text) {
  static const std::regex kSecretPair(
      R"(((?:[A-Za-z0-9_.-]*(?:signature|credential|secret|token|password|authorization|accesskey)[A-Za-z0-9_.-]*)\s*[=:]\s*)([^&\s,;]+))",
      std::regex::icase);
  return std::regex_replace(std::string(text), kSecretPair, "$1***");
}

}  // namespace granary
