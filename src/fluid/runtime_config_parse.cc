// runtime.json parsing (see runtime_config.h). Kept apart from the mapping
// onto Granary's settings so the libFuzzer target (runtime_config_fuzz.cc)
// links only this file, uri.cc, units.cc and status.cc.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/units.h"
#include "fluid/runtime_config.h"

namespace granary::fluid {
namespace {

using json = nlohmann::json;

// "fs.oss.accessKeyId" -> "fsossaccesskeyid": option spellings differ only in
// case and separators across Fluid's runtimes, boto3, s3fs and Hadoop.
std::string Normalize(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '-' || c == '_' || c == '.') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

bool OneOf(const std::string& normalized, std::initializer_list<std::string_view> spellings) {
  for (std::string_view s : spellings) {
    if (normalized == Normalize(s)) return true;
  }
  return false;
}

// The Granary S3 option a mount option names ("" = not an alias).
std::string S3OptionAlias(const std::string& key) {
  const std::string n = Normalize(key);
  if (OneOf(n, {"endpoint", "endpoint_url", "endpointUrl", "aws_endpoint_url", "s3.endpoint",
                "fs.oss.endpoint", "fs.bos.endpoint", "fs.s3a.endpoint", "fs.s3.endpoint"})) {
    return "endpoint";
  }
  if (OneOf(n, {"region", "region_name", "aws_region", "fs.oss.region", "fs.s3a.endpoint.region",
                "fs.s3a.region", "fs.bos.region"})) {
    return "region";
  }
  if (OneOf(n, {"path_style", "pathStyle", "use_path_style", "force_path_style",
                "fs.s3a.path.style.access", "s3ForcePathStyle"})) {
    return "path_style";
  }
  return "";
}

// The Granary secret an encryptOptions name stands for ("" = unknown).
std::string SecretAlias(const std::string& name) {
  const std::string n = Normalize(name);
  if (OneOf(n, {"access-key", "accessKey", "accessKeyId", "access-key-id", "aws_access_key_id",
                "fs.oss.accessKeyId", "fs.s3a.access.key", "fs.bos.accessKeyId", "ak"})) {
    return "accessKeyId";
  }
  if (OneOf(n, {"secret-key", "secretKey", "secretAccessKey", "secret-access-key",
                "aws_secret_access_key", "fs.oss.accessKeySecret", "fs.s3a.secret.key",
                "fs.bos.accessKeySecret", "sk"})) {
    return "secretAccessKey";
  }
  if (OneOf(n, {"session-token", "sessionToken", "token", "security-token", "securityToken",
                "aws_session_token", "fs.oss.securityToken", "fs.s3a.session.token",
                "fs.bos.sessionToken"})) {
    return "sessionToken";
  }
  return "";
}

}  // namespace

Result<bool> ParseBoolOption(const std::string& field, const std::string& v) {
  const std::string n = Normalize(v);
  if (n == "true" || n == "1" || n == "yes" || n == "on") return true;
  if (n == "false" || n == "0" || n == "no" || n == "off") return false;
  return InvalidArgument(field + " '" + v + "': expected true or false");
}

namespace {

// A JSON scalar as text (Fluid writes strings; numbers and booleans are
// accepted from hand-written files).
Result<std::string> Scalar(const json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return v.dump();
  return InvalidArgument(field + ": expected a string, not " + v.dump());
}

Result<std::map<std::string, std::string>> StringMap(const json& obj, const std::string& field) {
  std::map<std::string, std::string> out;
  if (obj.is_null()) return out;
  if (!obj.is_object()) return InvalidArgument(field + ": expected an object, not " + obj.dump());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    ASSIGN_OR_RETURN(out[it.key()], Scalar(it.value(), field + "." + it.key()));
  }
  return out;
}

// The contents of a secret file, without trailing whitespace. Only a regular
// file of at most 64 KiB (not a device, FIFO or directory someone named).
Result<std::string> ReadSecret(const std::string& field, const std::string& path) {
  constexpr std::streamsize kMaxSecret = 64 << 10;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return NotFound(field + ": cannot read secret file " + path + ": " +
                    (ec ? ec.message() : std::string(std::strerror(ENOENT))));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return InvalidArgument(field + ": secret file " + path + " is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFound(field + ": cannot read secret file " + path + ": " + std::strerror(errno));
  }
  std::string value(kMaxSecret + 1, '\0');
  in.read(value.data(), kMaxSecret + 1);
  value.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<std::streamsize>(value.size()) > kMaxSecret) {
    return InvalidArgument(field + ": secret file " + path + " is larger than 64 KiB");
  }
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  if (value.empty()) return InvalidArgument(field + ": secret file " + path + " is empty");
  return value;
}

// mounts[i].path: "/imagenet" -> "imagenet"; "" and "/" -> "" (the root).
Result<std::string> MountPath(const std::string& field, std::string path, const std::string& name) {
  if (path.empty()) path = "/" + name;
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "." || part == "..") {
      return InvalidArgument(field + " '" + path + "': '.' and '..' are not allowed");
    }
    if (!part.empty()) out += (out.empty() ? "" : "/") + part;
    i = j;
  }
  return out;
}

// mountPoint -> the source Uri: s3/s3a/oss/bos (S3-compatible), http(s),
// pvc://CLAIM/SUB (<pvc_root>/CLAIM/SUB), local:///PATH.
Result<Uri> MountUri(const std::string& field, const std::string& mp, const std::string& pvc_root) {
  const size_t sep = mp.find("://");
  if (sep == std::string::npos) {
    return InvalidArgument(
        field + " '" + mp +
        "': not a URI (expected s3://, oss://, bos://, pvc://, local:// or http://)");
  }
  std::string scheme = mp.substr(0, sep);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string rest = mp.substr(sep + 3);
  Result<Uri> uri = InvalidArgument("");
  if (scheme == "s3" || scheme == "s3a" || scheme == "oss" || scheme == "bos" || scheme == "http" ||
      scheme == "https") {
    uri = ParseUri(mp);
  } else if (scheme == "pvc") {
    if (rest.empty() || rest.front() == '/') {
      return InvalidArgument(field + " '" + mp + "': missing the claim name (pvc://CLAIM[/SUB])");
    }
    uri = ParseUri(pvc_root + "/" + rest);
  } else if (scheme == "local") {
    if (rest.empty() || rest.front() != '/') {
      return InvalidArgument(field + " '" + mp + "': expected an absolute path (local:///PATH)");
    }
    uri = ParseUri(rest);
  } else {
    return InvalidArgument(field + " '" + mp + "': unknown scheme " + scheme +
                           " (expected s3, oss, bos, pvc, local or http)");
  }
  if (!uri.ok()) return InvalidArgument(field + " '" + mp + "': " + uri.status().message());
  return *uri;
}

Result<FluidMount> ParseMount(const json& m, size_t i, const std::string& pvc_root) {
  const std::string field = "mounts[" + std::to_string(i) + "]";
  if (!m.is_object()) return InvalidArgument(field + ": expected an object, not " + m.dump());
  FluidMount out;
  auto mp = m.find("mountPoint");
  if (mp == m.end() || !mp->is_string() || mp->get<std::string>().empty()) {
    return InvalidArgument(field + ".mountPoint: required");
  }
  out.mount_point = mp->get<std::string>();
  if (auto n = m.find("name"); n != m.end()) {
    ASSIGN_OR_RETURN(out.name, Scalar(*n, field + ".name"));
  }
  std::string path;
  if (auto p = m.find("path"); p != m.end() && !p->is_null()) {
    ASSIGN_OR_RETURN(path, Scalar(*p, field + ".path"));
  }
  if (path.empty() && out.name.empty()) {
    return InvalidArgument(field + ": needs a name or a path");
  }
  ASSIGN_OR_RETURN(out.path, MountPath(field + ".path", path, out.name));
  ASSIGN_OR_RETURN(out.uri, MountUri(field + ".mountPoint", out.mount_point, pvc_root));

  ASSIGN_OR_RETURN(auto options, StringMap(m.value("options", json()), field + ".options"));
  const bool s3 = out.uri.scheme == Scheme::kS3;
  for (const auto& [k, v] : options) {
    const std::string alias = s3 ? S3OptionAlias(k) : "";
    if (alias == "endpoint") {
      // fs.oss.endpoint is usually a bare host name.
      out.ufs.options["endpoint"] = v.find("://") == std::string::npos ? "https://" + v : v;
    } else if (alias == "region") {
      out.ufs.options["region"] = v;
    } else if (alias == "path_style") {
      ASSIGN_OR_RETURN(bool path_style, ParseBoolOption(field + ".options." + k, v));
      out.ufs.options["addressing"] = path_style ? "path" : "virtual";
    } else {
      out.ufs.options[k] = v;  // Granary's own key; the connector checks it at open
    }
  }

  const json enc = m.value("encryptOptions", json());
  if (!enc.is_null()) {
    std::map<std::string, std::string> files;
    if (enc.is_object()) {
      ASSIGN_OR_RETURN(files, StringMap(enc, field + ".encryptOptions"));
    } else if (enc.is_array()) {
      // Dataset-style [{name, valueFrom: {secretKeyRef: {name, key}}}]: the
      // file Fluid mounts for it.
      for (size_t j = 0; j < enc.size(); ++j) {
        const std::string ef = field + ".encryptOptions[" + std::to_string(j) + "]";
        const json& e = enc[j];
        const json ref = e.is_object()
                             ? e.value("valueFrom", json::object()).value("secretKeyRef", json())
                             : json();
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !ref.is_object() ||
            !ref.contains("name") || !ref.contains("key")) {
          return InvalidArgument(ef + ": expected {name, valueFrom: {secretKeyRef: {name, key}}}");
        }
        files[e["name"].get<std::string>()] =
            "/etc/fluid/secrets/" + ref.value("name", "") + "/" + ref.value("key", "");
      }
    } else {
      return InvalidArgument(field + ".encryptOptions: expected an object of name -> file path");
    }
    for (const auto& [name, file] : files) {
      const std::string ef = field + ".encryptOptions." + name;
      const std::string secret = SecretAlias(name);
      if (secret.empty()) {
        return InvalidArgument(ef + ": unknown secret name '" + name +
                               "' (expected access-key, secret-key or session-token)");
      }
      if (!s3) return InvalidArgument(ef + ": secrets apply to S3-compatible mounts only");
      ASSIGN_OR_RETURN(out.ufs.secrets[secret], ReadSecret(ef, file));
    }
  }
  return out;
}

Result<double> Ratio(const json& level, const char* key, double fallback,
                     const std::string& field) {
  auto it = level.find(key);
  if (it == level.end() || it->is_null()) return fallback;
  ASSIGN_OR_RETURN(std::string text, Scalar(*it, field + "." + key));
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v > 0) || v > 1) {
    return InvalidArgument(field + "." + key + " '" + text + "': expected a number in (0, 1]");
  }
  return v;
}

Result<std::vector<std::string>> StringList(const json& v, const std::string& field) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (v.is_string()) return SplitList(v.get<std::string>(), ',');  // "a,b"
  if (!v.is_array()) return InvalidArgument(field + ": expected a list, not " + v.dump());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSIGN_OR_RETURN(std::string s, Scalar(v[i], field + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<TierLevel>> ParseTiers(const json& levels, const std::string& field) {
  std::vector<TierLevel> out;
  if (levels.is_null()) return out;
  if (!levels.is_array()) return InvalidArgument(field + ": expected a list");
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::string lf = field + "[" + std::to_string(i) + "]";
    const json& l = levels[i];
    if (!l.is_object()) return InvalidArgument(lf + ": expected an object");
    Medium medium = Medium::kSsd;
    if (auto mt = l.find("mediumType"); mt != l.end() && !mt->is_null()) {
      ASSIGN_OR_RETURN(std::string text, Scalar(*mt, lf + ".mediumType"));
      const std::string n = Normalize(text);
      if (n == "mem" || n == "memory") {
        medium = Medium::kMem;
      } else if (n == "ssd") {
        medium = Medium::kSsd;
      } else if (n == "hdd") {
        medium = Medium::kHdd;
      } else {
        return InvalidArgument(lf + ".mediumType '" + text + "': expected MEM, SSD or HDD");
      }
    }
    ASSIGN_OR_RETURN(std::vector<std::string> paths,
                     StringList(l.value("mountPaths", json()), lf + ".mountPaths"));
    if (paths.empty()) {
      if (medium != Medium::kMem) return InvalidArgument(lf + ".mountPaths: at least one path");
      paths.push_back("/dev/shm");  // processMemory
    }
    ASSIGN_OR_RETURN(std::vector<std::string> quotas,
                     StringList(l.value("quotas", l.value("quota", json())), lf + ".quotas"));
    if (quotas.size() != 1 && quotas.size() != paths.size()) {
      return InvalidArgument(lf + ".quotas: " + std::to_string(quotas.size()) + " quotas for " +
                             std::to_string(paths.size()) + " mountPaths");
    }
    ASSIGN_OR_RETURN(double high, Ratio(l, "high", 0.95, lf));
    ASSIGN_OR_RETURN(double low, Ratio(l, "low", 0.7, lf));
    if (low >= high) {
      return InvalidArgument(lf + ": low " + std::to_string(low) + " must be below high " +
                             std::to_string(high));
    }
    for (size_t j = 0; j < paths.size(); ++j) {
      const std::string& qtext = quotas.size() == 1 ? quotas[0] : quotas[j];
      auto quota = ParseSize(qtext);
      const std::string qf = lf + ".quotas[" + std::to_string(quotas.size() == 1 ? 0 : j) + "]";
      if (!quota.ok()) return InvalidArgument(qf + ": " + quota.status().message());
      if (*quota == 0) return InvalidArgument(qf + " '" + qtext + "': must be > 0");
      // One quota shared by several paths is split between them.
      const uint64_t q = quotas.size() == 1 ? *quota / paths.size() : *quota;
      if (paths[j].empty() || paths[j].front() != '/') {
        return InvalidArgument(lf + ".mountPaths[" + std::to_string(j) + "] '" + paths[j] +
                               "': expected an absolute path");
      }
      out.push_back(
          TierLevel{.medium = medium, .path = paths[j], .quota = q, .high = high, .low = low});
    }
  }
  return out;
}

Result<FluidComponent> ParseComponent(const json& c, const std::string& field) {
  FluidComponent out;
  if (c.is_null()) return out;
  if (!c.is_object()) return InvalidArgument(field + ": expected an object");
  out.present = true;
  if (auto e = c.find("enabled"); e != c.end() && !e->is_null()) {
    if (!e->is_boolean()) return InvalidArgument(field + ".enabled: expected true or false");
    out.enabled = e->get<bool>();
  }
  if (auto n = c.find("name"); n != c.end()) {
    ASSIGN_OR_RETURN(out.name, Scalar(*n, field + ".name"));
  }
  if (auto r = c.find("replicas"); r != c.end() && !r->is_null()) {
    if (!r->is_number_integer() || r->get<int64_t>() < 0 || r->get<int64_t>() > 10000) {
      return InvalidArgument(field + ".replicas " + r->dump() + ": expected an integer 0..10000");
    }
    out.replicas = static_cast<int>(r->get<int64_t>());
  }
  if (auto s = c.find("service"); s != c.end() && s->is_object()) {
    if (auto n = s->find("name"); n != s->end()) {
      ASSIGN_OR_RETURN(out.service_name, Scalar(*n, field + ".service.name"));
    }
  }
  ASSIGN_OR_RETURN(out.options, StringMap(c.value("options", json()), field + ".options"));
  ASSIGN_OR_RETURN(out.tiers,
                   ParseTiers(c.value("tieredStoreLevels", json()), field + ".tieredStoreLevels"));
  return out;
}

}  // namespace

bool FluidMount::operator==(const FluidMount& o) const {
  return name == o.name && mount_point == o.mount_point && path == o.path &&
         uri.ToString() == o.uri.ToString() && ufs.options == o.ufs.options &&
         ufs.secrets == o.ufs.secrets;
}

namespace {

// ParseRuntimeConfig without the file's name in front of its errors.
Result<FluidRuntime> ParseRuntimeFields(std::string_view json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not valid JSON");
  if (!j.is_object()) return InvalidArgument("expected a JSON object");
  FluidRuntime rt;
  try {
    ASSIGN_OR_RETURN(rt.master, ParseComponent(j.value("master", json()), "master"));
    ASSIGN_OR_RETURN(rt.worker, ParseComponent(j.value("worker", json()), "worker"));
    ASSIGN_OR_RETURN(rt.client, ParseComponent(j.value("client", json()), "client"));
    const auto pvc = rt.worker.options.find("pvcRoot");
    const std::string pvc_root =
        pvc == rt.worker.options.end() ? std::string(kDefaultPvcRoot) : pvc->second;
    const json mounts = j.value("mounts", json());
    if (!mounts.is_array() || mounts.empty()) {
      return InvalidArgument("mounts: at least one mount is required");
    }
    std::set<std::string> paths;
    for (size_t i = 0; i < mounts.size(); ++i) {
      ASSIGN_OR_RETURN(FluidMount m, ParseMount(mounts[i], i, pvc_root));
      if (!paths.insert(m.path).second) {
        return InvalidArgument("mounts[" + std::to_string(i) + "].path '/" + m.path +
                               "': used by another mount");
      }
      rt.mounts.push_back(std::move(m));
    }
    // Nested mount paths would hide each other's files; the root only alone.
    for (const FluidMount& a : rt.mounts) {
      for (const FluidMount& b : rt.mounts) {
        if (&a == &b) continue;
        if (a.path.empty() || b.path.starts_with(a.path + "/")) {
          return InvalidArgument("mounts: path '/" + b.path + "' lies inside '/" + a.path +
                                 "' of another mount");
        }
      }
    }
    ASSIGN_OR_RETURN(rt.access_modes, StringList(j.value("accessModes", json()), "accessModes"));
    if (rt.access_modes.empty()) rt.access_modes.push_back("ReadOnlyMany");
    if (auto t = j.find("targetPath"); t != j.end() && !t->is_null()) {
      ASSIGN_OR_RETURN(rt.target_path, Scalar(*t, "targetPath"));
    }
  } catch (const json::exception& e) {
    return InvalidArgument(e.what());
  }
  return rt;
}

}  // namespace

Result<FluidRuntime> ParseRuntimeConfig(std::string_view json_text, std::string_view source) {
  auto rt = ParseRuntimeFields(json_text);
  if (!rt.ok())
    return Status(rt.status().code(), std::string(source) + ": " + rt.status().message());
  return rt;
}

Result<std::string> ReadRuntimeConfigText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("runtime config " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<FluidRuntime> LoadRuntimeConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadRuntimeConfigText(path));
  return ParseRuntimeConfig(text, path);
}

}  // namespace granary::fluid
