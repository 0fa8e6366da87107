// Leveled logging for Granary: one line per event, never secrets.
//
// Wraps spdlog. Use GLOG_DEBUG / GLOG_INFO / GLOG_WARN / GLOG_ERROR with fmt-style
// arguments. Anything that may hold a credential (URLs with signatures, headers,
// config options) must go through RedactSecrets() before it reaches a log line.
//
// Thread safety: all functions are thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary {

// Sets the process-wide level: "trace", "debug", "info", "warn", "error", "off".
// Unknown names give InvalidArgument naming the value.
Status SetLogLevel(std::string_view level);

// Sends log lines to stderr (the default) with a compact "[time level] msg" format.
void InitLogging();

// Replaces values of query parameters and header-like "key=value"/"key: value"
// pairs whose key looks secret (signature, credential, secret, token, password,
// authorization) with "***".
std::string RedactSecrets(std::string_view text);

}  // namespace granary

#define GLOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define GLOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define GLOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define GLOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define GLOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
