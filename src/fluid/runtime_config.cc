// Fluid runtime.json mapped onto Granary: peers, ordinals, cluster options (see runtime_config.h).
#include "fluid/runtime_config.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cluster/membership.h"
#include "common/units.h"

namespace granary::fluid {
namespace {

Result<int> PortOption(const std::map<std::string, std::string>& o) {
  const std::string text = OptionOr(o, "peerPort", std::to_string(kDefaultPeerPort));
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > 65535) {
    return InvalidArgument("option peerPort '" + text + "': expected a port 1..65535");
  }
  return static_cast<int>(v);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string OptionOr(const std::map<std::string, std::string>& options, const std::string& key,
                     const std::string& fallback) {
  auto it = options.find(key);
  return it == options.end() ? fallback : it->second;
}

std::string RuntimeConfigPath(const std::string& flag) {
  if (!flag.empty()) return flag;
  const std::string env = Env("FLUID_RUNTIME_CONFIG_PATH");
  return env.empty() ? "/etc/fluid/config/runtime.json" : env;
}

std::string DatasetSource(const FluidRuntime& rt) {
  std::string ns = Env("FLUID_DATASET_NAMESPACE");
  std::string name = Env("FLUID_DATASET_NAME");
  if (ns.empty()) ns = "default";
  if (name.empty()) {
    const FluidComponent& c = rt.worker.present ? rt.worker : rt.client;
    name = c.name;
    for (std::string_view suffix : {"-worker", "-client", "-fuse"}) {
      if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
    }
    if (name.empty()) name = "dataset";
  }
  return "fluid://" + ns + "/" + name;
}

std::vector<std::string> MountPaths(const FluidRuntime& rt) {
  std::vector<std::string> out;
  for (const FluidMount& m : rt.mounts) out.push_back("/" + m.path);
  return out;
}

Result<int> WorkerOrdinal(const FluidComponent& worker, std::string_view pod_name,
                          std::string_view hostname) {
  for (std::string_view name : {pod_name, hostname}) {
    if (name.empty()) continue;
    if (!worker.name.empty() && !name.starts_with(worker.name + "-")) continue;
    const size_t dash = name.rfind('-');
    if (dash == std::string_view::npos || dash + 1 == name.size()) continue;
    const std::string digits(name.substr(dash + 1));
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6) continue;
    return std::atoi(digits.c_str());
  }
  return NotFound("cannot tell this worker's ordinal: neither POD_NAME '" + std::string(pod_name) +
                  "' nor the hostname '" + std::string(hostname) + "' is " +
                  (worker.name.empty() ? std::string("<worker>") : worker.name) +
                  "-<ordinal> (set POD_NAME from the downward API)");
}

Result<std::vector<std::string>> WorkerAddresses(const FluidComponent& worker) {
  std::vector<std::string> out;
  const std::string explicit_peers = OptionOr(worker.options, "peers");
  if (!explicit_peers.empty()) {
    ASSIGN_OR_RETURN(std::vector<cluster::Member> members,
                     cluster::ParsePeerList(explicit_peers, 1));
    for (const cluster::Member& m : members) out.push_back(m.address);
    return out;
  }
  if (worker.name.empty()) return InvalidArgument("worker.name: required to name the worker pods");
  if (worker.service_name.empty()) {
    return InvalidArgument(
        "worker.service.name: required to reach the worker pods "
        "(or give the option peers)");
  }
  if (worker.replicas < 1) {
    return InvalidArgument("worker.replicas " + std::to_string(worker.replicas) +
                           ": a cache needs at least one worker");
  }
  ASSIGN_OR_RETURN(int port, PortOption(worker.options));
  for (int i = 0; i < worker.replicas; ++i) {
    out.push_back(worker.name + "-" + std::to_string(i) + "." + worker.service_name + ":" +
                  std::to_string(port));
  }
  return out;
}

std::map<std::string, std::string> RoleOptions(const FluidRuntime& rt, Role role) {
  std::map<std::string, std::string> out = rt.worker.options;
  if (role == Role::kClient) {
    for (const auto& [k, v] : rt.client.options) out[k] = v;
  }
  return out;
}

PodIdentity PodIdentityFromEnvironment() {
  PodIdentity id{.pod_name = Env("POD_NAME"), .pod_ip = Env("POD_IP")};
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) id.hostname = host;
  return id;
}

Result<ClusterOptions> BuildClusterOptions(const FluidRuntime& rt, Role role,
                                           const PodIdentity& pod) {
  const std::map<std::string, std::string> o = RoleOptions(rt, role);
  ClusterOptions c;
  c.etcd = OptionOr(o, "etcd");
  c.name = OptionOr(o, "clusterName");
  c.secret_file = OptionOr(o, "secretFile");
  if (const std::string v = OptionOr(o, "insecure"); !v.empty()) {
    ASSIGN_OR_RETURN(c.insecure, ParseBoolOption("option insecure", v));
  }
  if (const std::string v = OptionOr(o, "cacheReplicas"); !v.empty()) {
    char* end = nullptr;
    const long r = std::strtol(v.c_str(), &end, 10);
    if (*end != '\0' || r < 1 || r > 8) {
      return InvalidArgument("option cacheReplicas '" + v + "': expected 1..8");
    }
    c.replicas = static_cast<int>(r);
  }
  if (const std::string v = OptionOr(o, "peerTimeout"); !v.empty()) {
    auto d = ParseDuration(v);
    if (!d.ok()) return InvalidArgument("option peerTimeout: " + d.status().message());
    c.peer_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
    if (c.peer_timeout.count() <= 0) return InvalidArgument("option peerTimeout: must be > 0");
  }
  ASSIGN_OR_RETURN(int port, PortOption(o));
  std::string self;
  if (role == Role::kWorker) {
    std::vector<std::string> members;
    if (c.etcd.empty()) {
      ASSIGN_OR_RETURN(members, WorkerAddresses(rt.worker));
    }
    ASSIGN_OR_RETURN(int ordinal, WorkerOrdinal(rt.worker, pod.pod_name, pod.hostname));
    if (!members.empty()) {
      if (ordinal >= static_cast<int>(members.size())) {
        return InvalidArgument("worker ordinal " + std::to_string(ordinal) + " is beyond the " +
                               std::to_string(members.size()) + " workers of the runtime");
      }
      self = members[ordinal];
    } else {
      self = rt.worker.name + "-" + std::to_string(ordinal) + "." + rt.worker.service_name + ":" +
             std::to_string(port);
    }
    if (c.etcd.empty()) {
      std::string list;
      for (const std::string& m : members) list += (list.empty() ? "" : ",") + m;
      c.peers = list;
    }
  } else {
    c.client_only = true;
    if (c.etcd.empty()) {
      ASSIGN_OR_RETURN(std::vector<std::string> members, WorkerAddresses(rt.worker));
      std::string list;
      for (const std::string& m : members) list += (list.empty() ? "" : ",") + m;
      c.peers = list;
    }
    const std::string host = !pod.pod_ip.empty() ? pod.pod_ip : pod.hostname;
    self = !pod.advertise.empty()
               ? pod.advertise
               : (host.empty() ? "localhost" : host) + ":" + std::to_string(port);
  }
  ASSIGN_OR_RETURN(cluster::HostPort hp, cluster::ParseHostPort(self));
  // Listen on every interface at this member's own port: the pod's name
  // resolves to its IP, which is not known before the pod runs.
  c.listen = "0.0.0.0:" + std::to_string(hp.port);
  c.advertise = self;
  RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace granary::fluid
