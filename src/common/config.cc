#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "common/units.h"
#include "common/uri.h"

namespace granary {
namespace {

Status FieldError(std::string_view source, std::string_view field, std::string_view value,
                  std::string_view why) {
  std::string msg(source);
  msg += ": ";
  msg += field;
  if (!value.empty()) {
    msg += " = '";
    msg += value;
    msg += "'";
  }
  msg += ": ";
  msg += why;
  return InvalidArgument(std::move(msg));
}

// n[key] without yaml-cpp's throwing "zombie" nodes: missing keys give an
// undefined node that tests false and can be indexed again.
YAML::Node Get(const YAML::Node& n, const char* key) {
  if (!n || !n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  YAML::Node child = n[key];
  return child ? child : YAML::Node(YAML::NodeType::Undefined);
}

std::string Scalar(const YAML::Node& n) {
  return n.IsScalar() ? n.as<std::string>() : std::string();
}

Result<double> ParseFraction(std::string_view source, std::string_view field, const YAML::Node& n) {
  std::string text = Scalar(n);
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing");
    if (v <= 0 || v > 1) return FieldError(source, field, text, "must be in (0, 1]");
    return v;
  } catch (const std::exception&) {
    return FieldError(source, field, text, "expected a number such as 0.95");
  }
}

Result<int> ParseInt(std::string_view source, std::string_view field, const YAML::Node& n, int lo,
                     int hi) {
  std::string text = Scalar(n);
  try {
    size_t used = 0;
    long v = std::stol(text, &used);
    if (used != text.size() || v < lo || v > hi) throw std::invalid_argument("range");
    return static_cast<int>(v);
  } catch (const std::exception&) {
    return FieldError(
        source, field, text,
        "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

Result<std::string> ReadSecretFile(std::string_view source, std::string_view field,
                                   const std::string& path) {
  std::ifstream in(path);
  if (!in) return FieldError(source, field, path, "cannot read secret file");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string value = ss.str();
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  return value;
}

Status ParseMount(std::string_view source, const std::string& field, const YAML::Node& node,
                  const std::string& secrets_dir, MountSpec* out) {
  if (!node.IsMap()) return FieldError(source, field, "", "expected a mapping");
  out->uri = Scalar(Get(node, "mountPoint"));
  if (out->uri.empty()) return FieldError(source, field + ".mountPoint", "", "missing");
  auto uri = ParseUri(out->uri);
  if (!uri.ok()) return FieldError(source, field + ".mountPoint", out->uri, uri.status().message());
  out->name = Scalar(Get(node, "name"));
  if (const auto& opts = Get(node, "options"); opts) {
    if (!opts.IsMap()) return FieldError(source, field + ".options", "", "expected a mapping");
    for (const auto& kv : opts) out->options[kv.first.as<std::string>()] = Scalar(kv.second);
  }
  if (const auto& enc = Get(node, "encryptOptions"); enc) {
    if (!enc.IsSequence())
      return FieldError(source, field + ".encryptOptions", "", "expected a list");
    for (size_t i = 0; i < enc.size(); ++i) {
      std::string f = field + ".encryptOptions[" + std::to_string(i) + "]";
      std::string name = Scalar(Get(enc[i], "name"));
      if (name.empty()) return FieldError(source, f + ".name", "", "missing");
      std::string path;
      if (Get(enc[i], "valueFile")) {
        path = Scalar(Get(enc[i], "valueFile"));
      } else if (const auto& ref = Get(Get(enc[i], "valueFrom"), "secretKeyRef"); ref) {
        std::string sname = Scalar(Get(ref, "name"));
        std::string skey = Scalar(Get(ref, "key"));
        if (sname.empty() || skey.empty()) {
          return FieldError(source, f + ".valueFrom.secretKeyRef", "", "needs name and key");
        }
        path = secrets_dir + "/" + sname + "/" + skey;
      } else {
        return FieldError(source, f, name, "needs valueFile or valueFrom.secretKeyRef");
      }
      auto value = ReadSecretFile(source, f, path);
      if (!value.ok()) return value.status();
      out->secrets[name] = *value;
    }
  }
  return Status::Ok();
}

// A scalar, or a list of scalars joined with commas.
std::string ScalarOrList(const YAML::Node& n) {
  if (!n.IsSequence()) return Scalar(n);
  std::string out;
  for (size_t i = 0; i < n.size(); ++i) out += (i ? "," : "") + Scalar(n[i]);
  return out;
}

Status ParseCluster(std::string_view source, const YAML::Node& c, ClusterConfig* out) {
  if (!c.IsMap()) return FieldError(source, "runtime.cluster", "", "expected a mapping");
  out->listen = Scalar(Get(c, "listen"));
  out->advertise = Scalar(Get(c, "advertise"));
  out->peers = ScalarOrList(Get(c, "peers"));
  out->etcd = ScalarOrList(Get(c, "etcd"));
  out->name = Scalar(Get(c, "name"));
  out->secret_file = Scalar(Get(c, "secretFile"));
  out->peer_timeout = Scalar(Get(c, "peerTimeout"));
  for (auto [name, field] :
       {std::pair{"insecure", &out->insecure}, std::pair{"clientOnly", &out->client_only}}) {
    if (const auto& n = Get(c, name); n) {
      const std::string v = Scalar(n);
      if (v != "true" && v != "false") {
        return FieldError(source, std::string("runtime.cluster.") + name, v,
                          "expected true or false");
      }
      *field = v == "true";
    }
  }
  if (Get(c, "replicas")) {
    ASSIGN_OR_RETURN(out->replicas,
                     ParseInt(source, "runtime.cluster.replicas", Get(c, "replicas"), 1, 8));
  }
  if (!out->peer_timeout.empty()) {
    if (auto d = ParseDuration(out->peer_timeout); !d.ok()) {
      return FieldError(source, "runtime.cluster.peerTimeout", out->peer_timeout,
                        d.status().message());
    }
  }
  return Status::Ok();
}

Status ParseLevel(std::string_view source, const std::string& field, const YAML::Node& node,
                  std::vector<TierLevel>* out) {
  if (!node.IsMap()) return FieldError(source, field, "", "expected a mapping");
  TierLevel level;
  auto medium = ParseMedium(Scalar(Get(node, "mediumtype")));
  if (!medium.ok()) {
    return FieldError(source, field + ".mediumtype", Scalar(Get(node, "mediumtype")),
                      "expected MEM, SSD or HDD");
  }
  level.medium = *medium;
  auto quota_text = Scalar(Get(node, "quota"));
  if (quota_text.empty()) return FieldError(source, field + ".quota", "", "missing");
  auto quota = ParseSize(quota_text);
  if (!quota.ok())
    return FieldError(source, field + ".quota", quota_text, quota.status().message());
  level.quota = *quota;
  if (Get(node, "high")) {
    ASSIGN_OR_RETURN(level.high, ParseFraction(source, field + ".high", Get(node, "high")));
  }
  if (Get(node, "low")) {
    ASSIGN_OR_RETURN(level.low, ParseFraction(source, field + ".low", Get(node, "low")));
  }
  std::vector<std::string> paths;
  const auto& p = Get(node, "path");
  if (p.IsSequence()) {
    for (const auto& x : p) paths.push_back(Scalar(x));
  } else {
    std::stringstream ss(Scalar(p));
    std::string part;
    while (std::getline(ss, part, ',')) paths.push_back(part);
  }
  if (paths.empty()) return FieldError(source, field + ".path", "", "missing");
  // Fluid splits one level's quota evenly over its paths.
  for (const auto& path : paths) {
    if (path.empty() || path.front() != '/') {
      return FieldError(source, field + ".path", path, "must be an absolute directory");
    }
    TierLevel l = level;
    l.path = path;
    l.quota = level.quota / paths.size();
    out->push_back(l);
  }
  return Status::Ok();
}

}  // namespace

std::string_view MediumName(Medium m) {
  switch (m) {
    case Medium::kMem: return "MEM";
    case Medium::kSsd: return "SSD";
    case Medium::kHdd: return "HDD";
  }
  return "?";
}

Result<Medium> ParseMedium(std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (t == "MEM") return Medium::kMem;
  if (t == "SSD") return Medium::kSsd;
  if (t == "HDD") return Medium::kHdd;
  return InvalidArgument("medium '" + std::string(text) + "': expected MEM, SSD or HDD");
}

Status Config::Validate() const {
  for (size_t i = 0; i < tiers.size(); ++i) {
    const auto& t = tiers[i];
    std::string f = "runtime.tieredstore.levels[" + std::to_string(i) + "]";
    if (t.quota == 0) return FieldError("config", f + ".quota", "0", "must be positive");
    if (t.low > t.high) {
      return FieldError("config", f + ".low", std::to_string(t.low), "must not exceed high");
    }
  }
  if (policy != "lru" && policy != "training") {
    return FieldError("config", "runtime.cache.policy", policy, "expected lru or training");
  }
  if (block_size < 4096 || (block_size & (block_size - 1)) != 0) {
    return FieldError("config", "runtime.cache.blockSize", std::to_string(block_size),
                      "must be a power of two of at least 4KiB");
  }
  if (ufs_concurrency < 1) {
    return FieldError("config", "runtime.cache.ufsConcurrency", std::to_string(ufs_concurrency),
                      "must be at least 1");
  }
  return Status::Ok();
}

namespace {

// dataset: name, accessModes, mounts.
Status ParseDatasetSection(std::string_view source, const YAML::Node& ds, Config& cfg) {
  cfg.dataset_name = Scalar(Get(ds, "name"));
  if (const auto& modes = Get(ds, "accessModes"); modes) {
    if (!modes.IsSequence())
      return FieldError(source, "dataset.accessModes", "", "expected a list");
    for (size_t i = 0; i < modes.size(); ++i) {
      std::string m = Scalar(modes[i]);
      if (m != "ReadOnlyMany" && m != "ReadWriteMany" && m != "ReadWriteOnce" &&
          m != "ReadOnlyOnce") {
        return FieldError(source, "dataset.accessModes[" + std::to_string(i) + "]", m,
                          "expected ReadOnlyMany, ReadWriteMany or ReadWriteOnce");
      }
      cfg.access_modes.push_back(std::move(m));
    }
  }
  if (const auto& mounts = Get(ds, "mounts"); mounts) {
    if (!mounts.IsSequence()) return FieldError(source, "dataset.mounts", "", "expected a list");
    for (size_t i = 0; i < mounts.size(); ++i) {
      MountSpec m;
      RETURN_IF_ERROR(ParseMount(source, "dataset.mounts[" + std::to_string(i) + "]", mounts[i],
                                 cfg.secrets_dir, &m));
      cfg.mounts.push_back(std::move(m));
    }
  }
  return Status::Ok();
}

// runtime.cache: policy, blockSize, originTimeout, ufsConcurrency.
Status ParseCacheSection(std::string_view source, const YAML::Node& cache, Config& cfg) {
  if (Get(cache, "policy")) cfg.policy = Scalar(Get(cache, "policy"));
  if (Get(cache, "blockSize")) {
    auto bs = ParseSize(Scalar(Get(cache, "blockSize")));
    if (!bs.ok()) {
      return FieldError(source, "runtime.cache.blockSize", Scalar(Get(cache, "blockSize")),
                        bs.status().message());
    }
    cfg.block_size = *bs;
  }
  if (Get(cache, "originTimeout")) {
    cfg.origin_timeout = Scalar(Get(cache, "originTimeout"));
    auto d = ParseDuration(cfg.origin_timeout);
    if (!d.ok() || d->count() <= 0) {
      return FieldError(source, "runtime.cache.originTimeout", cfg.origin_timeout,
                        d.ok() ? "must be > 0" : d.status().message());
    }
  }
  if (Get(cache, "ufsConcurrency")) {
    ASSIGN_OR_RETURN(cfg.ufs_concurrency, ParseInt(source, "runtime.cache.ufsConcurrency",
                                                   Get(cache, "ufsConcurrency"), 1, 4096));
  }
  return Status::Ok();
}

// runtime: replicas, tieredstore.levels, cache, cluster.
Status ParseRuntimeSection(std::string_view source, const YAML::Node& runtime, Config& cfg) {
  if (Get(runtime, "replicas")) {
    ASSIGN_OR_RETURN(cfg.replicas,
                     ParseInt(source, "runtime.replicas", Get(runtime, "replicas"), 1, 10000));
  }
  if (const auto& levels = Get(Get(runtime, "tieredstore"), "levels"); levels) {
    if (!levels.IsSequence()) {
      return FieldError(source, "runtime.tieredstore.levels", "", "expected a list");
    }
    for (size_t i = 0; i < levels.size(); ++i) {
      RETURN_IF_ERROR(ParseLevel(source, "runtime.tieredstore.levels[" + std::to_string(i) + "]",
                                 levels[i], &cfg.tiers));
    }
    std::stable_sort(cfg.tiers.begin(), cfg.tiers.end(),
                     [](const TierLevel& a, const TierLevel& b) { return a.medium < b.medium; });
  }
  if (const auto& cache = Get(runtime, "cache"); cache) {
    RETURN_IF_ERROR(ParseCacheSection(source, cache, cfg));
  }
  if (const auto& cluster = Get(runtime, "cluster"); cluster) {
    RETURN_IF_ERROR(ParseCluster(source, cluster, &cfg.cluster));
  }
  return Status::Ok();
}

}  // namespace

Result<Config> ParseConfig(std::string_view yaml_text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string(source) + ": not valid YAML: " + e.what());
  }
  Config cfg;
  if (!root || root.IsNull()) return cfg;
  if (!root.IsMap()) return FieldError(source, "(top level)", "", "expected a mapping");
  try {
    const auto& runtime = Get(root, "runtime");
    // secretsDir first: the dataset's mounts name secret files relative to it.
    if (runtime && Get(runtime, "secretsDir")) cfg.secrets_dir = Scalar(Get(runtime, "secretsDir"));
    if (const auto& ds = Get(root, "dataset"); ds)
      RETURN_IF_ERROR(ParseDatasetSection(source, ds, cfg));
    if (runtime) RETURN_IF_ERROR(ParseRuntimeSection(source, runtime, cfg));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string(source) + ": " + e.what());
  }
  RETURN_IF_ERROR(cfg.Validate().WithContext(source));
  return cfg;
}

Result<Config> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("config file '" + path + "': cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path);
}

bool Config::writable() const {
  for (const std::string& m : access_modes) {
    if (m == "ReadWriteMany" || m == "ReadWriteOnce") return true;
  }
  return false;
}

Result<TierLevel> ParseCacheDirSpec(const std::string& text, std::string_view what) {
  const std::string named = std::string(what) + " '" + text + "': ";
  TierLevel t{.medium = Medium::kSsd, .path = text};
  if (size_t colon = text.rfind(':'); colon != std::string::npos) {
    auto quota = ParseSize(text.substr(colon + 1));
    if (!quota.ok()) return InvalidArgument(named + quota.status().message());
    if (*quota == 0) return InvalidArgument(named + "quota must be > 0");
    t.path = text.substr(0, colon);
    t.quota = *quota;
  }
  if (t.path.empty()) return InvalidArgument(named + "empty directory");
  return t;
}

}  // namespace granary
