// NetnsCluster: bridge, namespaces, veth pairs and tbf by `ip`/`tc`; processes
// by posix_spawn in sessions of their own.
#include "netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <sstream>
#include <thread>

extern char** environ;

namespace granary::testing {
namespace {

std::atomic<int> g_sequence{0};

// The first executable `name` on $PATH (or in /usr/sbin, /sbin), "" if none.
std::string FindBinary(const std::string& name) {
  std::string path = getenv("PATH") ? getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    std::string full = dir + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

// Runs a setup command; Internal with its stderr when it fails.
Status Must(const std::vector<std::string>& argv) {
  ProcessResult r = RunProcess(argv, std::chrono::seconds(30));
  if (r.exit_code == 0) return Status::Ok();
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return Internal(cmd + ": exit " + std::to_string(r.exit_code) + ": " + r.err);
}

// IPv4 prefixes ("a.b.c.d" or "a.b.c.d/len") named anywhere in `text`.
std::vector<std::pair<uint32_t, int>> Prefixes(const std::string& text) {
  std::vector<std::pair<uint32_t, int>> out;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    std::string addr = w;
    int len = 32;
    if (size_t slash = w.find('/'); slash != std::string::npos) {
      addr = w.substr(0, slash);
      len = std::atoi(w.c_str() + slash + 1);
    }
    in_addr a{};
    if (::inet_pton(AF_INET, addr.c_str(), &a) == 1 && len >= 0 && len <= 32) {
      out.emplace_back(ntohl(a.s_addr), len);
    }
  }
  return out;
}

bool Overlaps(uint32_t a, int alen, uint32_t b, int blen) {
  int len = std::min(alen, blen);
  uint32_t mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  return (a & mask) == (b & mask);
}

}  // namespace

Result<std::unique_ptr<NetnsCluster>> NetnsCluster::Create(NetnsOptions options) {
  if (options.nodes < 1 || options.nodes > 200) {
    return InvalidArgument("NetnsCluster: nodes must be 1..200");
  }
  std::unique_ptr<NetnsCluster> c(new NetnsCluster(std::move(options)));
  std::string why;
  if (::geteuid() != 0) {
    why = "not root";
  } else if (FindBinary("ip").empty() || FindBinary("nsenter").empty()) {
    why = "ip or nsenter missing";
  } else if (!c->options_.link_rate.empty() && FindBinary("tc").empty()) {
    why = "tc missing";
  } else if (Status s = c->Build(); !s.ok()) {
    c->Teardown();
    why = s.ToString();
  }
  if (why.empty()) {
    c->isolated_ = true;
    return c;
  }
  if (!c->options_.allow_fallback) return Unavailable("network namespaces: " + why);
  c->fallback_reason_ = why;
  c->tag_.clear();
  c->subnet_.clear();
  return c;
}

Status NetnsCluster::Build() {
  tag_ = "g" + std::to_string(::getpid()) + static_cast<char>('a' + g_sequence++ % 26);
  // A 10.X.Y.0/24 that no local address or route overlaps.
  ProcessResult routes = RunProcess({FindBinary("ip"), "-4", "route", "show", "table", "all"});
  ProcessResult addrs = RunProcess({FindBinary("ip"), "-4", "-o", "addr", "show"});
  auto taken = Prefixes(routes.out + " " + addrs.out);
  uint32_t seed = static_cast<uint32_t>(::getpid()) * 2654435761u + g_sequence.load() * 40503u;
  for (int attempt = 0; attempt < 1000 && subnet_.empty(); ++attempt) {
    uint32_t x = 100 + (seed >> 8) % 150, y = seed % 256;
    seed = seed * 1103515245u + 12345u;
    uint32_t net = (10u << 24) | (x << 16) | (y << 8);
    bool clash = false;
    for (auto [a, len] : taken) clash = clash || Overlaps(net, 24, a, len);
    if (!clash) subnet_ = "10." + std::to_string(x) + "." + std::to_string(y) + ".";
  }
  if (subnet_.empty()) return Unavailable("no free 10.X.Y.0/24");

  const std::string ip = FindBinary("ip"), tc = FindBinary("tc");
  const std::string bridge = tag_ + "br";
  RETURN_IF_ERROR(Must({ip, "link", "add", bridge, "type", "bridge"}));
  links_.push_back(bridge);
  RETURN_IF_ERROR(Must({ip, "addr", "add", subnet_ + "254/24", "dev", bridge}));
  RETURN_IF_ERROR(Must({ip, "link", "set", bridge, "up"}));
  for (int host = kOrigin; host < nodes(); ++host) {
    const std::string idx = host == kOrigin ? "o" : std::to_string(host);
    const std::string ns = ns_name(host), outer = tag_ + "h" + idx, inner = tag_ + "c" + idx;
    RETURN_IF_ERROR(Must({ip, "netns", "add", ns}));
    namespaces_.push_back(ns);
    RETURN_IF_ERROR(Must({ip, "link", "add", outer, "type", "veth", "peer", "name", inner}));
    links_.push_back(outer);
    RETURN_IF_ERROR(Must({ip, "link", "set", inner, "netns", ns}));
    RETURN_IF_ERROR(Must({ip, "link", "set", outer, "master", bridge, "up"}));
    RETURN_IF_ERROR(Must({ip, "-n", ns, "link", "set", "lo", "up"}));
    RETURN_IF_ERROR(Must({ip, "-n", ns, "addr", "add", this->ip(host) + "/24", "dev", inner}));
    RETURN_IF_ERROR(Must({ip, "-n", ns, "link", "set", inner, "up"}));
    if (host != kOrigin && !options_.link_rate.empty()) {
      // Both directions of the node's link: towards it (bridge side) and from it.
      std::vector<std::string> tbf = {"root",  "tbf",   "rate",    options_.link_rate,
                                      "burst", "256kb", "latency", "50ms"};
      std::vector<std::string> out = {tc, "qdisc", "add", "dev", outer};
      std::vector<std::string> in = {tc, "-n", ns, "qdisc", "add", "dev", inner};
      out.insert(out.end(), tbf.begin(), tbf.end());
      in.insert(in.end(), tbf.begin(), tbf.end());
      RETURN_IF_ERROR(Must(out));
      RETURN_IF_ERROR(Must(in));
    }
  }
  return Status::Ok();
}

void NetnsCluster::Teardown() {
  std::set<pid_t> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left = children_;
  }
  for (pid_t pid : left) Kill(pid, SIGKILL);
  if (tag_.empty()) return;
  const std::string ip = FindBinary("ip");
  for (const std::string& ns : namespaces_) RunProcess({ip, "netns", "del", ns});
  namespaces_.clear();
  // Deleting a namespace deletes the veth inside and with it its peer; the
  // bridge (and any veth left by a half-built setup) are deleted here.
  for (auto it = links_.rbegin(); it != links_.rend(); ++it) {
    ProcessResult r = RunProcess({ip, "link", "show", *it});
    if (r.exit_code == 0) RunProcess({ip, "link", "del", *it});
  }
  links_.clear();
}

NetnsCluster::~NetnsCluster() { Teardown(); }

std::string NetnsCluster::ip(int host) const {
  int last = host == kOrigin ? 1 : host + 2;
  return (subnet_.empty() ? std::string("127.0.0.") : subnet_) + std::to_string(last);
}

std::string NetnsCluster::ns_name(int host) const {
  if (tag_.empty()) return "";
  return tag_ + (host == kOrigin ? std::string("o") : "n" + std::to_string(host));
}

int NetnsCluster::PortFor(int host, int preferred) const {
  (void)host;
  if (isolated_) return preferred;
  Result<int> port = FreeLoopbackPort();
  return port.ok() ? *port : preferred;
}

std::vector<std::string> NetnsCluster::Wrap(int host, const std::vector<std::string>& argv) const {
  if (!isolated_) return argv;
  std::vector<std::string> out = {FindBinary("nsenter"), "--net=/run/netns/" + ns_name(host), "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

Result<pid_t> NetnsCluster::Spawn(int host, const std::vector<std::string>& argv,
                                  const std::string& log_path) {
  std::vector<std::string> full = Wrap(host, argv);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<char*> args;
  for (const auto& a : full) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Internal("spawn " + full[0] + ": " + std::strerror(rc));
  std::lock_guard<std::mutex> lock(mu_);
  children_.insert(pid);
  return pid;
}

bool NetnsCluster::Running(pid_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  if (children_.count(pid) == 0) return false;
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) {
    children_.erase(pid);
    return false;
  }
  return true;
}

int NetnsCluster::Kill(pid_t pid, int signal, std::chrono::seconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (children_.erase(pid) == 0) return -1;
  }
  ::kill(-pid, signal);
  ::kill(pid, signal);
  int status = 0;
  auto until = std::chrono::steady_clock::now() + grace;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child's exit
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

ProcessResult NetnsCluster::Run(int host, const std::vector<std::string>& argv,
                                std::chrono::seconds deadline) const {
  std::vector<std::string> full = Wrap(host, argv);
  if (!full.empty() && full[0].find('/') == std::string::npos) {
    std::string found = FindBinary(full[0]);
    if (!found.empty()) full[0] = found;
  }
  return RunProcess(full, deadline);
}

Status WaitForTcp(const std::string& ip, int port, std::chrono::seconds deadline) {
  auto until = std::chrono::steady_clock::now() + deadline;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) return InvalidArgument("bad ip " + ip);
  while (std::chrono::steady_clock::now() < until) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{.tv_sec = 1, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (up) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling an external server
  }
  return Unavailable(ip + ":" + std::to_string(port) + ": nothing listening after " +
                     std::to_string(deadline.count()) + "s");
}

Result<std::string> HttpGet(const std::string& url, std::chrono::seconds deadline) {
  std::string curl = FindBinary("curl");
  if (curl.empty()) return Unavailable("curl is not installed");
  ProcessResult r = RunProcess({curl, "-sf", "--max-time", std::to_string(deadline.count()), url},
                               deadline + std::chrono::seconds(5));
  if (r.exit_code != 0) {
    return Unavailable("GET " + url + ": curl exit " + std::to_string(r.exit_code) + " " + r.err);
  }
  return r.out;
}

}  // namespace granary::testing
