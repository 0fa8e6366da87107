// Resolution of AWS credentials and settings from options, secrets, the
// environment and the shared files. See aws_credentials.h.
#include "ufs/aws_credentials.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace granary {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
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
  AwsCredentials creds{.access_key_id = key_id, .secret_access_key = secret, .session_token = token};
  if (creds.empty()) {
    creds = AwsCredentials{.access_key_id = EnvOr(env, "AWS_ACCESS_KEY_ID"),
                           .secret_access_key = EnvOr(env, "AWS_SECRET_ACCESS_KEY"),
                           .session_token = EnvOr(env, "AWS_SESSION_TOKEN")};
  }
  for (const auto* section : {&cred_section, &config_section}) {
    if (!creds.empty()) break;
    creds = AwsCredentials{.access_key_id = Lookup(*section, "aws_access_key_id"),
                           .secret_access_key = Lookup(*section, "aws_secret_access_key"),
                           .session_token = Lookup(*section, "aws_session_token")};
  }
  if (!creds.empty()) s.credentials = std::move(creds);

  s.region = FirstOf({Lookup(options, "region"), EnvOr(env, "AWS_REGION"),
                      EnvOr(env, "AWS_DEFAULT_REGION"), Lookup(config_section, "region"),
                      "us-east-1"});
  s.endpoint = FirstOf({Lookup(options, "endpoint"), EnvOr(env, "AWS_ENDPOINT_URL"),
                        Lookup(config_section, "endpoint_url")});
  s.ca_bundle = FirstOf({Lookup(options, "caBundle"), EnvOr(env, "AWS_CA_BUNDLE"),
                         Lookup(config_section, "ca_bundle")});
  return s;
}

}  // namespace granary
