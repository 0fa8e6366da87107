// AWS settings and credentials resolved the way AWS tools do, so users can
// reuse their environment, ~/.aws files and Fluid secrets unchanged.
//
// Order for each value (first non-empty wins):
//   credentials: UfsOptions.secrets (accessKeyId, secretAccessKey, sessionToken,
//                or their *File variants naming a file that holds the value, as
//                Fluid mounts secrets) -> env AWS_ACCESS_KEY_ID,
//                AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN -> the profile's
//                section of the shared credentials file, then of the config file
//   region:      options.region -> AWS_REGION -> AWS_DEFAULT_REGION -> profile
//                "region" in the config file -> "us-east-1"
//   endpoint:    options.endpoint -> AWS_ENDPOINT_URL -> profile endpoint_url -> ""
//   caBundle:    options.caBundle -> AWS_CA_BUNDLE -> profile ca_bundle -> ""
//   profile:     options.profile -> AWS_PROFILE -> "default"
// Files: AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials) with [name]
// sections, AWS_CONFIG_FILE (default ~/.aws/config) with [profile name]
// sections ([default] for the default profile). Missing files are fine.
//
// Secrets are never logged and never appear in error messages.
// Thread safety: pure functions of their arguments (and the files they read).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials

  bool empty() const { return access_key_id.empty() || secret_access_key.empty(); }
};

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// The real process environment.
std::optional<std::string> ProcessEnv(std::string_view name);

struct AwsSettings {
  std::optional<AwsCredentials> credentials;  // nullopt: none found anywhere (anonymous)
  std::string region;                          // never empty
  std::string endpoint;                        // "" = AWS's default for the region
  std::string ca_bundle;                       // "" = system CA store
  std::string profile;                         // the profile consulted
};

// Resolves settings from explicit options/secrets (keys as in
// docs/configuration.md), the environment and the AWS shared files.
// InvalidArgument when a secret file cannot be read or only half of a key pair
// is given, naming the key (never the value).
Result<AwsSettings> ResolveAwsSettings(const std::map<std::string, std::string>& options,
                                       const std::map<std::string, std::string>& secrets,
                                       const EnvLookup& env = ProcessEnv);

// Parses an INI file's text into section -> key -> value. Section names are
// kept as written inside the brackets ("default", "profile dev").
std::map<std::string, std::map<std::string, std::string>> ParseIni(std::string_view text);

}  // namespace granary
