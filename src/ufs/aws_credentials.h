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
// Temporary credentials: NewAwsCredentialsProvider() walks the AWS
// SDKs' default chain -- explicit options/secrets -> environment -> web
// identity (STS AssumeRoleWithWebIdentity) -> profile files -> container
// credentials endpoint -> EC2 instance metadata (IMDSv2) -- and returns an
// AwsCredentialsProvider that keeps the first source that answered and
// refreshes from it ahead of expiry and after the server calls the
// credentials expired. docs/configuration.md "Credentials" lists the
// variables and the refresh rules.
//
// Secrets are never logged and never appear in error messages (nor do access
// key ids).
// Thread safety: the free functions are pure functions of their arguments
// (and the files and endpoints they read); AwsCredentialsProvider is
// thread-safe (see its comment).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/mutex.h"
#include "granary/status.h"

namespace granary {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials
  int64_t expiration_ns = 0;  // wall-clock expiry, ns since the epoch; 0 = never expires

  bool empty() const { return access_key_id.empty() || secret_access_key.empty(); }
};

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// The real process environment.
std::optional<std::string> ProcessEnv(std::string_view name);

// Where AwsSettings::credentials came from.
enum class AwsCredentialOrigin {
  kNone,         // no static credentials: the chain goes on to web identity, container, IMDS
  kExplicit,     // UfsOptions secrets (or their *File variants); never refreshed
  kEnvironment,  // AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; never refreshed
  kProfile,      // the shared credentials or config file; re-read when the files change
};

struct AwsSettings {
  std::optional<AwsCredentials> credentials;  // nullopt: no static credentials found
  AwsCredentialOrigin credential_origin = AwsCredentialOrigin::kNone;
  std::string region;            // never empty
  std::string endpoint;          // "" = AWS's default for the region
  std::string ca_bundle;         // "" = system CA store
  std::string profile;           // the profile consulted
  std::string credentials_file;  // shared credentials file path ("" = none)
  std::string config_file;       // config file path ("" = none)
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

// One link of the credential chain, kept by a provider to refresh from.
// Implementations are used by one thread at a time (the provider serialises).
class AwsCredentialSource {
 public:
  virtual ~AwsCredentialSource() = default;
  // "web identity", "profile", "container", "instance metadata" (for messages).
  virtual std::string Name() const = 0;
  // Fetches credentials now. Unavailable when the endpoint cannot be reached
  // or answers 5xx; PermissionDenied / InvalidArgument when it refuses. The
  // message names the source and never a secret.
  virtual Result<AwsCredentials> Fetch() = 0;
  // For credentials without an expiry: true when a Fetch() may now give other
  // credentials (the profile files changed). Cheap (a stat).
  virtual bool Changed() { return false; }
};

// When credentials fetched at `fetched_ns` that expire at `expiration_ns`
// (wall ns) should be refreshed: max(5 min, 10% of the lifetime) before
// expiry, but never earlier than half-way through the lifetime.
int64_t RefreshDeadline(int64_t fetched_ns, int64_t expiration_ns);

// Parses "2024-05-01T12:00:00Z" (fractional seconds allowed) into wall ns.
std::optional<int64_t> ParseIso8601(std::string_view text);

// Holds the current credentials and refreshes them from their source.
//
// Get() is what every signed request calls: a mutex-guarded shared_ptr copy
// while the credentials are fresh. Once the refresh deadline passes, the first
// caller fetches new ones while the others keep using the still-valid
// credentials (they never wait); only when the credentials have expired do
// callers wait for the fetch. A failed refresh of still-valid credentials is
// retried after min(10 s, half the remaining time). Static credentials (no
// source) never change. Sources without expiry (profile) are polled for
// changes every 5 s.
//
// Thread safety: all methods may be called from many threads at once.
class AwsCredentialsProvider {
 public:
  // Static credentials: never refreshed.
  explicit AwsCredentialsProvider(AwsCredentials credentials);
  // `initial` was just fetched from `source`. `clock` (not owned) outlives this.
  AwsCredentialsProvider(std::unique_ptr<AwsCredentialSource> source, AwsCredentials initial,
                         Clock* clock = Clock::Real());
  ~AwsCredentialsProvider();
  AwsCredentialsProvider(const AwsCredentialsProvider&) = delete;
  AwsCredentialsProvider& operator=(const AwsCredentialsProvider&) = delete;

  // The credentials to sign with now. Never null on success. An error only
  // when the credentials have expired and the refresh failed.
  Result<std::shared_ptr<const AwsCredentials>> Get();

  // The server refused `rejected` as expired or invalid (S3 ExpiredToken).
  // Refreshes unless another caller already replaced them. True when the
  // current credentials differ from `rejected` (a retry may succeed); false
  // for static credentials or when the source gave the same ones again.
  Result<bool> RefreshAfterRejection(const AwsCredentials& rejected);

  // "static", or the source's Name().
  std::string source_name() const;
  // Successful fetches since construction (the initial one not counted).
  uint64_t refreshes() const;

 private:
  // Fetches and installs new credentials. Caller holds refresh_mu_.
  Result<std::shared_ptr<const AwsCredentials>> RefreshLocked(
      std::shared_ptr<const AwsCredentials> current) REQUIRES(refresh_mu_) EXCLUDES(state_mu_);
  void Install(AwsCredentials fresh) REQUIRES(refresh_mu_) EXCLUDES(state_mu_);

  std::unique_ptr<AwsCredentialSource> source_;  // null: static
  Clock* clock_;
  Mutex refresh_mu_ ACQUIRED_BEFORE(state_mu_);  // held while fetching (one refresh at a time)
  mutable Mutex state_mu_;  // guards current_, refresh_at_ns_, refreshes_; leaf lock
  std::shared_ptr<const AwsCredentials> current_ GUARDED_BY(state_mu_);
  int64_t refresh_at_ns_ GUARDED_BY(state_mu_) = INT64_MAX;  // wall ns; INT64_MAX = never
  uint64_t refreshes_ GUARDED_BY(state_mu_) = 0;
};

// Builds the provider for `settings` (from ResolveAwsSettings) following the
// default chain (see the top of this file). nullptr: no source has
// credentials (anonymous). A source that is configured (web identity or
// container variables set) but fails is an error naming it; instance
// metadata that does not answer means "no credentials".
Result<std::shared_ptr<AwsCredentialsProvider>> NewAwsCredentialsProvider(
    const AwsSettings& settings, const EnvLookup& env = ProcessEnv, Clock* clock = Clock::Real());

}  // namespace granary
