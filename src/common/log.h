// Leveled logging for Granary: one line per event, never secrets.
//
// Wraps spdlog. Use GLOG_DEBUG / GLOG_INFO / GLOG_WARN / GLOG_ERROR with fmt-style
// arguments. Anything that may hold a credential (URLs with signatures, headers,
// config options) must go through RedactSecrets() before it reaches a log line.
//
// Rate limit: a failing disk or origin must not fill the log. Each
// GLOG_INFO / GLOG_WARN / GLOG_ERROR call site writes at most kLogBurst lines
// per kLogWindow and counts the rest; its first line after the window ends is
// preceded by "(N similar messages suppressed: <format string>)". Time is read
// through the log clock (SetLogClock). GLOG_DEBUG and GLOG_TRACE, asked for
// explicitly, are not limited.
//
// Thread safety: all functions are thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "common/clock.h"
#include "common/mutex.h"
#include "granary/status.h"

namespace granary {

// Sets the process-wide level: "trace", "debug", "info", "warn", "error", "off".
// Unknown names give InvalidArgument naming the value.
Status SetLogLevel(std::string_view level);

// Sends log lines to stderr (the default) with a compact "[time level] msg" format.
void InitLogging();

// Sends log lines to `path` instead (the background daemon's log), keeping the
// level and format: the file is created 0600 and rotated at `max_bytes`, with
// `max_rotated` older files kept ("x/d.log" rotates to "x/d.1.log" ...
// "x/d.<max_rotated>.log"). Every line is
// flushed. Errors opening the file are returned; logging is then unchanged.
Status LogToFile(const std::string& path, size_t max_bytes, size_t max_rotated);

// Log-file size cap of background daemons: the live file and one rotated file
// of kLogFileMaxBytes each.
inline constexpr size_t kLogFileMaxBytes = 64u << 20;
inline constexpr size_t kLogFileRotated = 1;

// Lines per call site per window before later ones are only counted.
inline constexpr uint32_t kLogBurst = 10;
inline constexpr std::chrono::seconds kLogWindow{10};

// The clock the rate limit reads; nullptr restores the real one. For tests.
void SetLogClock(Clock* clock);

// Replaces values of query parameters and header-like "key=value"/"key: value"
// pairs whose key looks secret (signature, credential, secret, token, password,
// authorization) with "***".
std::string RedactSecrets(std::string_view text);

namespace log_internal {

// The rate-limit state of one call site. Guarded by mu (a leaf lock).
struct SiteState {
  Mutex mu;
  bool started GUARDED_BY(mu) = false;
  Clock::TimePoint window_start GUARDED_BY(mu){};
  uint32_t lines GUARDED_BY(mu) = 0;       // written in the current window
  uint64_t suppressed GUARDED_BY(mu) = 0;  // counted in the current window
};

// Whether a line of `site` is written now, and how many suppressed lines of
// the window that just ended to report first (0: none).
struct Admission {
  bool write = false;
  uint64_t report_suppressed = 0;
};
Admission Admit(SiteState& site);

// Writes the "(N similar messages suppressed: ...)" line.
void LogSuppressed(spdlog::level::level_enum level, uint64_t count, std::string_view format);

template <typename... Args>
void LogLimited(SiteState& site, spdlog::level::level_enum level,
                spdlog::format_string_t<Args...> format, Args&&... args) {
  if (!spdlog::should_log(level)) return;
  const Admission a = Admit(site);
  if (a.report_suppressed > 0) {
    const fmt::string_view text = format;
    LogSuppressed(level, a.report_suppressed, std::string_view(text.data(), text.size()));
  }
  if (a.write) spdlog::log(level, format, std::forward<Args>(args)...);
}

}  // namespace log_internal
}  // namespace granary

#define GRANARY_LOG_LIMITED(level, ...)                                        \
  do {                                                                         \
    static ::granary::log_internal::SiteState granary_log_site;                \
    ::granary::log_internal::LogLimited(granary_log_site, level, __VA_ARGS__); \
  } while (0)

#define GLOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define GLOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define GLOG_INFO(...) GRANARY_LOG_LIMITED(::spdlog::level::info, __VA_ARGS__)
#define GLOG_WARN(...) GRANARY_LOG_LIMITED(::spdlog::level::warn, __VA_ARGS__)
#define GLOG_ERROR(...) GRANARY_LOG_LIMITED(::spdlog::level::err, __VA_ARGS__)
