// Resolution of AWS credentials and settings from options, secrets, the
// environment and the shared files. See aws_credentials.h.
#include "ufs/aws_credentials.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <pugixml.hpp>
#include <sstream>

#include "common/log.h"
#include "common/uri.h"
#include "ufs/curl_client.h"
#include "ufs/sigv4.h"

namespace granary {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Lookup(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "" : it->second;
}

std::string EnvOr(const EnvLookup& env, std::string_view name) {
  auto v = env(name);
  return v ? *v : "";
}

// A secret given directly (`key`) or as a file holding it (`keyFile`, Fluid's
// mounted secrets). The file's trailing newline is dropped.
Result<std::string> SecretValue(const std::map<std::string, std::string>& secrets,
                                const std::map<std::string, std::string>& options,
                                const std::string& key) {
  std::string direct = Lookup(secrets, key);
  if (!direct.empty()) return std::string(Trim(direct));
  for (const auto* m : {&secrets, &options}) {
    std::string path = Lookup(*m, key + "File");
    if (path.empty()) continue;
    auto text = ReadWholeFile(path);
    if (!text) return InvalidArgument("secret " + key + "File: cannot read file '" + path + "'");
    return std::string(Trim(*text));
  }
  return std::string();
}

using IniFile = std::map<std::string, std::map<std::string, std::string>>;

IniFile LoadIni(const std::string& path) {
  auto text = ReadWholeFile(path);
  return text ? ParseIni(*text) : IniFile{};
}

std::string HomePath(const EnvLookup& env, const std::string& rel) {
  std::string home = EnvOr(env, "HOME");
  return home.empty() ? "" : home + "/" + rel;
}

const std::map<std::string, std::string>& Section(const IniFile& ini, const std::string& name) {
  static const std::map<std::string, std::string> kEmpty;
  auto it = ini.find(name);
  return it == ini.end() ? kEmpty : it->second;
}

// First non-empty value.
std::string FirstOf(std::initializer_list<std::string> values) {
  for (const auto& v : values) {
    if (!v.empty()) return v;
  }
  return "";
}

// The key pair of the profile's section in the credentials file, else in the
// config file; empty when neither has one.
AwsCredentials ProfileCredentials(const std::map<std::string, std::string>& cred_section,
                                  const std::map<std::string, std::string>& config_section) {
  AwsCredentials creds;
  for (const auto* section : {&cred_section, &config_section}) {
    if (!creds.empty()) break;
    creds = AwsCredentials{.access_key_id = Lookup(*section, "aws_access_key_id"),
                           .secret_access_key = Lookup(*section, "aws_secret_access_key"),
                           .session_token = Lookup(*section, "aws_session_token")};
  }
  return creds;
}

}  // namespace

std::optional<std::string> ProcessEnv(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

IniFile ParseIni(std::string_view text) {
  IniFile out;
  std::string section;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = std::string(Trim(line.substr(1, line.size() - 2)));
      out[section];
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    out[section][std::string(Trim(line.substr(0, eq)))] = std::string(Trim(line.substr(eq + 1)));
  }
  return out;
}

Result<AwsSettings> ResolveAwsSettings(const std::map<std::string, std::string>& options,
                                       const std::map<std::string, std::string>& secrets,
                                       const EnvLookup& env) {
  AwsSettings s;
  s.profile = FirstOf({Lookup(options, "profile"), EnvOr(env, "AWS_PROFILE"), "default"});
  const std::string cred_path =
      FirstOf({EnvOr(env, "AWS_SHARED_CREDENTIALS_FILE"), HomePath(env, ".aws/credentials")});
  const std::string config_path =
      FirstOf({EnvOr(env, "AWS_CONFIG_FILE"), HomePath(env, ".aws/config")});
  const IniFile cred_file = cred_path.empty() ? IniFile{} : LoadIni(cred_path);
  const IniFile config_file = config_path.empty() ? IniFile{} : LoadIni(config_path);
  const auto& cred_section = Section(cred_file, s.profile);
  const auto& config_section =
      Section(config_file, s.profile == "default" ? "default" : "profile " + s.profile);

  ASSIGN_OR_RETURN(std::string key_id, SecretValue(secrets, options, "accessKeyId"));
  ASSIGN_OR_RETURN(std::string secret, SecretValue(secrets, options, "secretAccessKey"));
  ASSIGN_OR_RETURN(std::string token, SecretValue(secrets, options, "sessionToken"));
  if (key_id.empty() != secret.empty()) {
    return InvalidArgument(std::string("s3 credentials: ") +
                           (key_id.empty() ? "secretAccessKey given without accessKeyId"
                                           : "accessKeyId given without secretAccessKey"));
  }
  AwsCredentials creds{
      .access_key_id = key_id, .secret_access_key = secret, .session_token = token};
  s.credential_origin = AwsCredentialOrigin::kExplicit;
  if (creds.empty()) {
    creds = AwsCredentials{.access_key_id = EnvOr(env, "AWS_ACCESS_KEY_ID"),
                           .secret_access_key = EnvOr(env, "AWS_SECRET_ACCESS_KEY"),
                           .session_token = EnvOr(env, "AWS_SESSION_TOKEN")};
    s.credential_origin = AwsCredentialOrigin::kEnvironment;
  }
  if (creds.empty()) {
    creds = ProfileCredentials(cred_section, config_section);
    s.credential_origin = AwsCredentialOrigin::kProfile;
  }
  if (creds.empty()) {
    s.credential_origin = AwsCredentialOrigin::kNone;
  } else {
    s.credentials = std::move(creds);
  }
  s.credentials_file = cred_path;
  s.config_file = config_path;

  s.region =
      FirstOf({Lookup(options, "region"), EnvOr(env, "AWS_REGION"),
               EnvOr(env, "AWS_DEFAULT_REGION"), Lookup(config_section, "region"), "us-east-1"});
  s.endpoint = FirstOf({Lookup(options, "endpoint"), EnvOr(env, "AWS_ENDPOINT_URL"),
                        Lookup(config_section, "endpoint_url")});
  s.ca_bundle = FirstOf({Lookup(options, "caBundle"), EnvOr(env, "AWS_CA_BUNDLE"),
                         Lookup(config_section, "ca_bundle")});
  return s;
}

// ---- Temporary credentials: sources, provider and the default chain ----

namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;
constexpr int64_t kChangePollNs = 5 * kNanosPerSecond;     // profile files' mtime check
constexpr int64_t kRetryRefreshNs = 10 * kNanosPerSecond;  // after a failed early refresh

// A credentials endpoint's HTTP status as a Status naming the source.
Status EndpointError(const std::string& source, const std::string& what, long status,
                     const std::string& code) {
  std::string msg = source + ": " + what + " answered HTTP " + std::to_string(status) +
                    (code.empty() ? "" : " " + code);
  if (status >= 500 || status == 429) return Unavailable(msg);
  if (status == 400) return InvalidArgument(msg);
  return PermissionDenied(msg);
}

// Credentials from the JSON of a container endpoint or IMDS (AccessKeyId,
// SecretAccessKey, Token, Expiration).
Result<AwsCredentials> ParseJsonCredentials(const std::string& source, const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  const auto field = [&](const char* name) -> std::string {
    if (!j.is_object() || !j.contains(name) || !j[name].is_string()) return "";
    return j[name].get<std::string>();
  };
  if (!j.is_object()) return Corruption(source + ": credentials are not a JSON object");
  const std::string code = field("Code");
  if (!code.empty() && code != "Success")
    return PermissionDenied(source + ": answered Code " + code);
  AwsCredentials c{.access_key_id = field("AccessKeyId"),
                   .secret_access_key = field("SecretAccessKey"),
                   .session_token = field("Token")};
  if (c.empty()) return Corruption(source + ": answer lacks AccessKeyId or SecretAccessKey");
  const std::string expiration = field("Expiration");
  if (!expiration.empty()) {
    auto ns = ParseIso8601(expiration);
    if (!ns) return Corruption(source + ": unreadable Expiration '" + expiration + "'");
    c.expiration_ns = *ns;
  }
  return c;
}

std::unique_ptr<CurlClient> CredentialsHttpClient(std::chrono::milliseconds connect_timeout) {
  return std::make_unique<CurlClient>(CurlClientOptions{
      .max_in_flight = 2,
      .connect_timeout = connect_timeout,
      .request_timeout = std::chrono::milliseconds(5000),
  });
}

std::string WithoutTrailingSlash(std::string url) {
  while (url.ends_with("/")) url.pop_back();
  return url;
}

// AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN: STS AssumeRoleWithWebIdentity,
// an unsigned POST. The token file is re-read on every fetch (kubelet rotates it).
class WebIdentitySource : public AwsCredentialSource {
 public:
  WebIdentitySource(std::string endpoint, std::string token_file, std::string role_arn,
                    std::string session_name)
      : endpoint_(WithoutTrailingSlash(std::move(endpoint))),
        token_file_(std::move(token_file)),
        role_arn_(std::move(role_arn)),
        session_name_(std::move(session_name)),
        http_(CredentialsHttpClient(std::chrono::milliseconds(5000))) {}

  std::string Name() const override { return "web identity"; }

  Result<AwsCredentials> Fetch() override {
    auto token = ReadWholeFile(token_file_);
    if (!token)
      return InvalidArgument(Name() + ": cannot read AWS_WEB_IDENTITY_TOKEN_FILE '" + token_file_ +
                             "'");
    const std::string body = CanonicalQuery({{"Action", "AssumeRoleWithWebIdentity"},
                                             {"Version", "2011-06-15"},
                                             {"RoleArn", role_arn_},
                                             {"RoleSessionName", session_name_},
                                             {"WebIdentityToken", std::string(Trim(*token))}});
    HttpRequest req{.method = "POST", .url = endpoint_ + "/", .body = body};
    req.headers.emplace_back("Content-Type", "application/x-www-form-urlencoded");
    req.headers.emplace_back("Accept", "application/xml");
    auto resp = http_->Send(req);
    if (!resp.ok())
      return Unavailable(Name() + ": STS " + endpoint_ + ": " + resp.status().message());
    pugi::xml_document doc;
    const bool parsed = doc.load_buffer(resp->body.data(), resp->body.size());
    if (resp->status != 200) {
      const std::string code = parsed ? doc.select_node("//Error/Code").node().text().get() : "";
      return EndpointError(Name(), "STS AssumeRoleWithWebIdentity", resp->status, code);
    }
    pugi::xml_node creds = doc.select_node("//AssumeRoleWithWebIdentityResult/Credentials").node();
    AwsCredentials c{.access_key_id = creds.child("AccessKeyId").text().get(),
                     .secret_access_key = creds.child("SecretAccessKey").text().get(),
                     .session_token = creds.child("SessionToken").text().get()};
    if (!parsed || c.empty()) return Corruption(Name() + ": STS answer lacks Credentials");
    auto expiration = ParseIso8601(creds.child("Expiration").text().get());
    if (!expiration) return Corruption(Name() + ": STS answer has no readable Expiration");
    c.expiration_ns = *expiration;
    return c;
  }

 private:
  const std::string endpoint_, token_file_, role_arn_, session_name_;
  std::unique_ptr<CurlClient> http_;
};

// The profile's keys in the shared files, re-read when either file changes.
class ProfileSource : public AwsCredentialSource {
 public:
  ProfileSource(std::string profile, std::string cred_path, std::string config_path)
      : profile_(std::move(profile)),
        cred_path_(std::move(cred_path)),
        config_path_(std::move(config_path)),
        stamp_(Stamp()) {}

  std::string Name() const override { return "profile " + profile_; }

  Result<AwsCredentials> Fetch() override {
    stamp_ = Stamp();
    const IniFile cred_file = cred_path_.empty() ? IniFile{} : LoadIni(cred_path_);
    const IniFile config_file = config_path_.empty() ? IniFile{} : LoadIni(config_path_);
    AwsCredentials c = ProfileCredentials(
        Section(cred_file, profile_),
        Section(config_file, profile_ == "default" ? "default" : "profile " + profile_));
    if (c.empty())
      return PermissionDenied(Name() + ": no aws_access_key_id in the shared files any more");
    return c;
  }

  bool Changed() override { return Stamp() != stamp_; }

 private:
  // Modification time and size of both files (0 for a missing one).
  std::array<int64_t, 4> Stamp() const {
    std::array<int64_t, 4> out{};
    const std::string* paths[] = {&cred_path_, &config_path_};
    for (int i = 0; i < 2; ++i) {
      struct stat st {};
      if (paths[i]->empty() || ::stat(paths[i]->c_str(), &st) != 0) continue;
      out[2 * i] = static_cast<int64_t>(st.st_mtim.tv_sec) * kNanosPerSecond + st.st_mtim.tv_nsec;
      out[2 * i + 1] = st.st_size;
    }
    return out;
  }

  const std::string profile_, cred_path_, config_path_;
  std::array<int64_t, 4> stamp_;
};

// ECS / EKS Pod Identity: GET the full or relative URI with the optional
// Authorization token (the token file is re-read on every fetch).
class ContainerSource : public AwsCredentialSource {
 public:
  ContainerSource(std::string url, std::string token, std::string token_file)
      : url_(std::move(url)),
        token_(std::move(token)),
        token_file_(std::move(token_file)),
        http_(CredentialsHttpClient(std::chrono::milliseconds(2000))) {}

  std::string Name() const override { return "container credentials"; }

  Result<AwsCredentials> Fetch() override {
    HttpRequest req{.method = "GET", .url = url_};
    std::string token = token_;
    if (!token_file_.empty()) {
      auto text = ReadWholeFile(token_file_);
      if (!text) {
        return InvalidArgument(Name() + ": cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE '" +
                               token_file_ + "'");
      }
      token = std::string(Trim(*text));
    }
    if (!token.empty()) req.headers.emplace_back("Authorization", token);
    req.headers.emplace_back("Accept", "application/json");
    auto resp = http_->Send(req);
    if (!resp.ok())
      return Unavailable(Name() + ": " + StripUserinfo(url_) + ": " + resp.status().message());
    if (resp->status != 200) return EndpointError(Name(), "the endpoint", resp->status, "");
    return ParseJsonCredentials(Name(), resp->body);
  }

 private:
  const std::string url_, token_, token_file_;
  std::unique_ptr<CurlClient> http_;
};

// EC2 instance metadata, IMDSv2 only: a session token from PUT
// /latest/api/token, then the role's credentials.
class InstanceMetadataSource : public AwsCredentialSource {
 public:
  explicit InstanceMetadataSource(std::string endpoint)
      : endpoint_(WithoutTrailingSlash(std::move(endpoint))),
        http_(CredentialsHttpClient(std::chrono::milliseconds(1000))) {}

  std::string Name() const override { return "instance metadata"; }

  Result<AwsCredentials> Fetch() override {
    HttpRequest put{.method = "PUT", .url = endpoint_ + "/latest/api/token", .body = ""};
    put.headers.emplace_back("X-aws-ec2-metadata-token-ttl-seconds", "21600");
    ASSIGN_OR_RETURN(HttpResponse token, Call(put));
    if (token.status != 200)
      return EndpointError(Name(), "PUT /latest/api/token", token.status, "");
    const std::string base = endpoint_ + "/latest/meta-data/iam/security-credentials/";
    HttpRequest list{.method = "GET", .url = base};
    list.headers.emplace_back("X-aws-ec2-metadata-token", std::string(Trim(token.body)));
    ASSIGN_OR_RETURN(HttpResponse roles, Call(list));
    if (roles.status != 200)
      return EndpointError(Name(), "security-credentials/", roles.status, "");
    const std::string role(Trim(std::string_view(roles.body).substr(0, roles.body.find('\n'))));
    if (role.empty()) return NotFound(Name() + ": the instance has no IAM role");
    HttpRequest get{.method = "GET", .url = base + UriEncode(role, true), .headers = list.headers};
    ASSIGN_OR_RETURN(HttpResponse creds, Call(get));
    if (creds.status != 200)
      return EndpointError(Name(), "security-credentials/<role>", creds.status, "");
    return ParseJsonCredentials(Name(), creds.body);
  }

 private:
  Result<HttpResponse> Call(const HttpRequest& req) {
    auto resp = http_->Send(req);
    if (!resp.ok()) return Unavailable(Name() + ": " + endpoint_ + ": " + resp.status().message());
    return resp;
  }

  const std::string endpoint_;
  std::unique_ptr<CurlClient> http_;
};

// Fetches once from a configured source; the error names the source.
Result<std::shared_ptr<AwsCredentialsProvider>> FirstFetch(
    std::unique_ptr<AwsCredentialSource> source, Clock* clock) {
  auto first = source->Fetch();
  if (!first.ok()) return first.status().WithContext("s3 credentials");
  GLOG_DEBUG("s3 credentials: from {}", source->Name());
  return std::make_shared<AwsCredentialsProvider>(std::move(source), std::move(*first), clock);
}

}  // namespace

std::optional<int64_t> ParseIso8601(std::string_view text) {
  const std::string s(Trim(text));
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return std::nullopt;
  }
  std::string_view rest = std::string_view(s).substr(consumed);
  if (rest.starts_with(".")) {
    rest.remove_prefix(1);
    while (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') rest.remove_prefix(1);
  }
  if (rest != "Z" && rest != "+00:00" && !rest.empty()) return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<int64_t>(t) * kNanosPerSecond;
}

int64_t RefreshDeadline(int64_t fetched_ns, int64_t expiration_ns) {
  if (expiration_ns == 0) return INT64_MAX;
  const int64_t lifetime = std::max<int64_t>(expiration_ns - fetched_ns, 0);
  const int64_t ahead =
      std::min(std::max<int64_t>(300 * kNanosPerSecond, lifetime / 10), lifetime / 2);
  return expiration_ns - ahead;
}

AwsCredentialsProvider::AwsCredentialsProvider(AwsCredentials credentials)
    : clock_(Clock::Real()),
      current_(std::make_shared<const AwsCredentials>(std::move(credentials))) {}

AwsCredentialsProvider::AwsCredentialsProvider(std::unique_ptr<AwsCredentialSource> source,
                                               AwsCredentials initial, Clock* clock)
    : source_(std::move(source)), clock_(clock) {
  Install(std::move(initial));
  MutexLock lock(state_mu_);
  refreshes_ = 0;
}

AwsCredentialsProvider::~AwsCredentialsProvider() = default;

void AwsCredentialsProvider::Install(AwsCredentials fresh) {
  const int64_t now = clock_->WallNanos();
  const int64_t refresh_at =
      fresh.expiration_ns == 0 ? now + kChangePollNs : RefreshDeadline(now, fresh.expiration_ns);
  auto next = std::make_shared<const AwsCredentials>(std::move(fresh));
  MutexLock lock(state_mu_);
  current_ = std::move(next);
  refresh_at_ns_ = refresh_at;
  ++refreshes_;
}

Result<std::shared_ptr<const AwsCredentials>> AwsCredentialsProvider::Get() {
  std::shared_ptr<const AwsCredentials> current;
  int64_t refresh_at;
  {
    MutexLock lock(state_mu_);
    current = current_;
    refresh_at = refresh_at_ns_;
  }
  const int64_t now = clock_->WallNanos();
  if (now < refresh_at) return current;
  const bool valid = current->expiration_ns == 0 || now < current->expiration_ns;
  if (valid) {
    if (!refresh_mu_.TryLock()) return current;  // someone is refreshing; ours still work
  } else {
    refresh_mu_.Lock();
  }
  MutexLock refresh(refresh_mu_, std::adopt_lock);
  {
    MutexLock lock(state_mu_);
    if (clock_->WallNanos() < refresh_at_ns_) return current_;  // refreshed meanwhile
    current = current_;
  }
  return RefreshLocked(std::move(current));
}

Result<std::shared_ptr<const AwsCredentials>> AwsCredentialsProvider::RefreshLocked(
    std::shared_ptr<const AwsCredentials> current) {
  const int64_t now = clock_->WallNanos();
  if (current->expiration_ns == 0 && !source_->Changed()) {
    MutexLock lock(state_mu_);
    refresh_at_ns_ = now + kChangePollNs;
    return current;
  }
  auto fresh = source_->Fetch();
  if (fresh.ok()) {
    GLOG_DEBUG("s3 credentials: refreshed from {}", source_->Name());
    Install(std::move(*fresh));
    MutexLock lock(state_mu_);
    return current_;
  }
  const bool valid = current->expiration_ns == 0 || now < current->expiration_ns;
  GLOG_WARN("s3 credentials: refresh failed ({}){}", fresh.status().ToString(),
            valid ? "; the current ones stay in use" : "");
  if (!valid) return fresh.status();
  MutexLock lock(state_mu_);
  const int64_t left = current->expiration_ns == 0 ? kRetryRefreshNs : current->expiration_ns - now;
  refresh_at_ns_ = now + std::min(kRetryRefreshNs, left / 2);
  return current;
}

Result<bool> AwsCredentialsProvider::RefreshAfterRejection(const AwsCredentials& rejected) {
  if (source_ == nullptr) return false;
  MutexLock refresh(refresh_mu_);
  std::shared_ptr<const AwsCredentials> current;
  {
    MutexLock lock(state_mu_);
    current = current_;
  }
  if (current->access_key_id != rejected.access_key_id ||
      current->session_token != rejected.session_token) {
    return true;  // already replaced by another caller
  }
  ASSIGN_OR_RETURN(AwsCredentials fresh, source_->Fetch());
  const bool changed = fresh.access_key_id != rejected.access_key_id ||
                       fresh.session_token != rejected.session_token;
  GLOG_INFO("s3 credentials: the server refused them as expired; re-fetched from {}{}",
            source_->Name(), changed ? "" : " (unchanged)");
  Install(std::move(fresh));
  return changed;
}

std::string AwsCredentialsProvider::source_name() const {
  return source_ == nullptr ? "static" : source_->Name();
}

uint64_t AwsCredentialsProvider::refreshes() const {
  MutexLock lock(state_mu_);
  return refreshes_;
}

Result<std::shared_ptr<AwsCredentialsProvider>> NewAwsCredentialsProvider(
    const AwsSettings& settings, const EnvLookup& env, Clock* clock) {
  if (settings.credentials && (settings.credential_origin == AwsCredentialOrigin::kExplicit ||
                               settings.credential_origin == AwsCredentialOrigin::kEnvironment)) {
    return std::make_shared<AwsCredentialsProvider>(*settings.credentials);
  }
  const std::string token_file = EnvOr(env, "AWS_WEB_IDENTITY_TOKEN_FILE");
  const std::string role_arn = EnvOr(env, "AWS_ROLE_ARN");
  if (!token_file.empty() && !role_arn.empty()) {
    const std::string endpoint =
        FirstOf({EnvOr(env, "AWS_ENDPOINT_URL_STS"), EnvOr(env, "AWS_ENDPOINT_URL"),
                 "https://sts." + settings.region + ".amazonaws.com"});
    const std::string session =
        FirstOf({EnvOr(env, "AWS_ROLE_SESSION_NAME"),
                 "granary-" + std::to_string(clock->WallNanos() / kNanosPerSecond)});
    return FirstFetch(std::make_unique<WebIdentitySource>(endpoint, token_file, role_arn, session),
                      clock);
  }
  if (settings.credentials && settings.credential_origin == AwsCredentialOrigin::kProfile) {
    return std::make_shared<AwsCredentialsProvider>(
        std::make_unique<ProfileSource>(settings.profile, settings.credentials_file,
                                        settings.config_file),
        *settings.credentials, clock);
  }
  const std::string full_uri = EnvOr(env, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  const std::string relative_uri = EnvOr(env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!full_uri.empty() || !relative_uri.empty()) {
    const std::string url =
        !relative_uri.empty() ? "http://169.254.170.2" + relative_uri : full_uri;
    return FirstFetch(
        std::make_unique<ContainerSource>(url, EnvOr(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN"),
                                          EnvOr(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")),
        clock);
  }
  std::string disabled = EnvOr(env, "AWS_EC2_METADATA_DISABLED");
  std::transform(disabled.begin(), disabled.end(), disabled.begin(), ::tolower);
  if (disabled == "true") return std::shared_ptr<AwsCredentialsProvider>();
  auto source = std::make_unique<InstanceMetadataSource>(
      FirstOf({EnvOr(env, "AWS_EC2_METADATA_SERVICE_ENDPOINT"), "http://169.254.169.254"}));
  auto first = source->Fetch();
  if (!first.ok()) {
    GLOG_DEBUG("s3 credentials: none found ({}); anonymous", first.status().ToString());
    return std::shared_ptr<AwsCredentialsProvider>();
  }
  return std::make_shared<AwsCredentialsProvider>(std::move(source), std::move(*first), clock);
}

}  // namespace granary
