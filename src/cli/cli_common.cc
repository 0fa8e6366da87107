// Shared CLI pieces: global flags, option resolution, error lines (see cli_common.h).
#include "cli/cli_common.h"

#include <ctime>
#include <iostream>

namespace granary::cli {
namespace {

// Strips trailing slashes so "a/b/" and "a/b" name the same directory.
std::string_view TrimSlashes(std::string_view key) {
  while (!key.empty() && key.back() == '/') key.remove_suffix(1);
  return key;
}

// True when `uri` lies inside `mount` (same root, key at or under the mount's key).
bool Contains(const Uri& mount, const Uri& uri) {
  if (mount.Root() != uri.Root()) return false;
  std::string_view base = TrimSlashes(mount.key);
  if (base.empty()) return true;
  std::string_view key = uri.key;
  return key.starts_with(base) && (key.size() == base.size() || key[base.size()] == '/');
}

// The mount of `config` containing `uri` with the longest key, or null.
const MountSpec* FindMount(const Config& config, const Uri& uri) {
  const MountSpec* best = nullptr;
  size_t best_len = 0;
  for (const MountSpec& m : config.mounts) {
    auto mount_uri = ParseUri(m.uri);
    if (!mount_uri.ok() || !Contains(*mount_uri, uri)) continue;
    size_t len = TrimSlashes(mount_uri->key).size();
    if (best == nullptr || len > best_len) {
      best = &m;
      best_len = len;
    }
  }
  return best;
}

}  // namespace

void AddGlobalFlags(CLI::App& app, GlobalFlags& flags) {
  app.add_option("--endpoint", flags.endpoint,
                 "S3 endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS_ENDPOINT_URL or AWS)")
      ->option_text("URL");
  app.add_option("--region", flags.region, "S3 region (default: AWS_REGION or us-east-1)")
      ->option_text("REGION");
  app.add_option("--config", flags.config_path,
                 "YAML config; a dataset mount containing the URI lends its options and secrets")
      ->option_text("FILE");
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error or off")
      ->option_text("LEVEL")
      ->capture_default_str();
}

Result<UfsOptions> ResolveUfsOptions(const Uri& uri, const GlobalFlags& flags) {
  UfsOptions out;
  if (!flags.config_path.empty()) {
    ASSIGN_OR_RETURN(Config config, LoadConfigFile(flags.config_path));
    if (const MountSpec* mount = FindMount(config, uri); mount != nullptr) {
      out.options = mount->options;
      out.secrets = mount->secrets;
    }
  }
  const bool s3 = uri.scheme == Scheme::kS3;
  if (!flags.endpoint.empty()) {
    if (!s3) return InvalidArgument("--endpoint applies to s3:// URIs only, not " + uri.ToString());
    out.options["endpoint"] = flags.endpoint;
  }
  if (!flags.region.empty()) {
    if (!s3) return InvalidArgument("--region applies to s3:// URIs only, not " + uri.ToString());
    out.options["region"] = flags.region;
  }
  return out;
}

Result<Location> OpenLocation(std::string_view text, const GlobalFlags& flags) {
  ASSIGN_OR_RETURN(Uri uri, ParseUri(text));
  ASSIGN_OR_RETURN(UfsOptions options, ResolveUfsOptions(uri, flags));
  ASSIGN_OR_RETURN(std::unique_ptr<UnderStorage> ufs, OpenUnderStorage(uri, options));
  return Location{.text = std::string(text), .uri = std::move(uri), .ufs = std::move(ufs)};
}

int ReportError(std::string_view what, const Status& status) {
  std::string reason =
      status.message().empty() ? std::string(CodeName(status.code())) : status.message();
  // The message usually starts with the location it is about; drop that when
  // it is the location the user named (or its root), so it is not said twice.
  std::vector<std::string> named = {std::string(what), "uri '" + std::string(what) + "'"};
  if (auto uri = ParseUri(what); uri.ok()) {
    named.push_back(uri->ToString());
    named.push_back(uri->ToString() + "/");  // the prefix `ls` listed
    named.push_back(uri->Root());
    if (uri->scheme == Scheme::kFile) named.push_back("/" + uri->key);
  }
  for (const std::string& n : named) {
    if (!n.empty() && reason.starts_with(n + ": ")) {
      reason.erase(0, n.size() + 2);
      break;
    }
  }
  std::cerr << "granary: " << what << ": " << reason << std::endl;
  return status.code() == Code::kInvalidArgument ? kExitUsage : kExitFailure;
}

std::string FormatIsoTime(int64_t mtime_ns) {
  if (mtime_ns == 0) return "-";
  std::time_t secs = static_cast<std::time_t>(mtime_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string DisplayKey(const Uri& uri, std::string_view key) {
  if (uri.scheme == Scheme::kFile) return "/" + std::string(key);
  return std::string(key);
}

}  // namespace granary::cli
