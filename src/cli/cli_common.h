// Shared pieces of the `granary` command-line tool: the global flags, opening
// an under storage from a URI the user typed (with --config mounts and flags
// applied), error lines, exit codes, and output formatting.
//
// Every verb lives in its own cmd_<verb>.cc and exposes one
// `void Register<Verb>Command(CLI::App&, CliContext&)` hook (listed in
// commands.h). A hook adds its subcommand and, when that subcommand is parsed,
// stores the action to run in CliContext::action; main() runs it after parsing
// has finished, so global flags given after the verb are already applied.
//
// Errors are one line on stderr: "granary: <what>: <reason>". Exit codes:
// 0 success, 1 the operation failed, 2 usage errors (bad flags, bad URI).
//
// Thread safety: single-threaded (the CLI's main thread).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/config.h"
#include "common/uri.h"
#include "granary/status.h"
#include "ufs/open.h"
#include "ufs/ufs.h"

namespace granary::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the operation failed (not found, unreachable, I/O)
inline constexpr int kExitUsage = 2;    // the command line was wrong (flags, URI syntax)

// Flags accepted by every verb, before or after it.
struct GlobalFlags {
  std::string endpoint;  // --endpoint: S3 endpoint URL; overrides the config and AWS_ENDPOINT_URL
  std::string region;    // --region: S3 signing region; overrides the config and AWS_REGION
  std::string config_path;  // --config: YAML file; a mount containing the URI lends its options
  std::string log_level = "warn";  // --log-level: trace | debug | info | warn | error | off
};

// State shared by main() and the verbs.
struct CliContext {
  GlobalFlags flags;
  // Set by the parsed verb; returns the exit code. Empty when no verb ran.
  std::function<int()> action;
};

// A location the user named, opened.
struct Location {
  std::string text;  // as typed, for error lines
  Uri uri;
  std::unique_ptr<UnderStorage> ufs;
};

// Adds the global flags to the top-level app.
void AddGlobalFlags(CLI::App& app, GlobalFlags& flags);

// The UfsOptions for `uri`: the options and secrets of the --config mount that
// contains it (longest match), then --endpoint/--region on top.
// InvalidArgument when the config is invalid or a flag does not apply to the scheme.
Result<UfsOptions> ResolveUfsOptions(const Uri& uri, const GlobalFlags& flags);

// Parses `text` and opens the connector serving it.
Result<Location> OpenLocation(std::string_view text, const GlobalFlags& flags);

// Prints "granary: <what>: <reason>" on stderr (the reason alone when it
// already names `what`'s root) and returns the exit code for `status`
// (kExitUsage for kInvalidArgument, kExitFailure otherwise).
int ReportError(std::string_view what, const Status& status);

// "2024-05-01T12:00:00Z" (UTC), or "-" when mtime_ns is 0 (unknown).
std::string FormatIsoTime(int64_t mtime_ns);

// How a key is shown to users: an absolute path for file://, the key otherwise.
std::string DisplayKey(const Uri& uri, std::string_view key);

}  // namespace granary::cli
