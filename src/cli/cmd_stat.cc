// `granary stat URI [--json]`: key, size, mtime and etag of one object.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/units.h"

namespace granary::cli {
namespace {

struct StatFlags {
  std::string uri;
  bool json = false;
};

int RunStat(const StatFlags& flags, const GlobalFlags& globals) {
  auto loc = OpenLocation(flags.uri, globals);
  if (!loc.ok()) return ReportError(flags.uri, loc.status());
  auto info = loc->ufs->Stat(loc->uri.key);
  if (!info.ok()) return ReportError(flags.uri, info.status());
  if (flags.json) {
    nlohmann::json j = {{"uri", loc->uri.ToString()}, {"key", info->key},
                        {"size", info->size},         {"mtime", FormatIsoTime(info->mtime_ns)},
                        {"mtime_ns", info->mtime_ns}, {"etag", info->etag}};
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("uri:   %s\n", loc->uri.ToString().c_str());
  std::printf("key:   %s\n", DisplayKey(loc->uri, info->key).c_str());
  std::printf("size:  %llu (%s)\n", static_cast<unsigned long long>(info->size),
              FormatSize(info->size).c_str());
  std::printf("mtime: %s\n", FormatIsoTime(info->mtime_ns).c_str());
  std::printf("etag:  %s\n", info->etag.empty() ? "-" : info->etag.c_str());
  return kExitOk;
}

}  // namespace

void RegisterStatCommand(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<StatFlags>();
  CLI::App* cmd = app.add_subcommand("stat", "Show key, size, mtime and etag of one object");
  cmd->add_option("URI", flags->uri, "s3://bucket/key, http(s)://host/path, file:///path or a path")
      ->required();
  cmd->add_flag("--json", flags->json, "Print one JSON object instead of lines");
  cmd->callback(
      [&ctx, flags] { ctx.action = [&ctx, flags] { return RunStat(*flags, ctx.flags); }; });
}

}  // namespace granary::cli
