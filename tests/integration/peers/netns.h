// NetnsCluster: several "hosts" on one machine for cluster tests and
// benchmarks. It creates a Linux bridge and N+1 network namespaces (the
// origin, then N nodes), joins each namespace to the bridge with a veth pair,
// gives them the addresses 10.X.Y.1 (origin) and 10.X.Y.2..N+1 (nodes) of a
// /24 that collides with no address or route of the machine, brings loopback
// up everywhere, and optionally caps every node link with tbf in both
// directions. The bridge itself gets 10.X.Y.254, so the test process (in the
// machine's own namespace) can reach every host: the origin, metrics, peers.
//
// Names carry the pid and a per-process sequence ("g<pid><seq>..."), at most
// 15 characters, so concurrent runs never share an interface or namespace.
//
// Commands run in a host's network namespace only (`nsenter --net=...`), never
// with `ip netns exec`, which also unshares the mount namespace and would hide
// a FUSE mount made inside from everyone else.
//
// Without root or `ip`, or when the kernel refuses, Create() falls back to
// loopback: every host shares the machine's namespace, the origin is
// 127.0.0.1 and the nodes 127.0.0.2..N+1, no link is shaped, and
// fallback_reason() says why (tests print it).
//
// Cleanup: the destructor kills (SIGKILL, by process group and PID) every
// process started through Spawn() that is still running, then deletes the
// namespaces, veth pairs and the bridge it created, by name. It does not
// unmount anything: callers unmount their FUSE mounts before.
//
// Thread safety: Spawn(), Kill(), Run() and the accessors may be called from
// any thread; construction and destruction from one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "granary/status.h"
#include "subprocess.h"

namespace granary::testing {

struct NetnsOptions {
  int nodes = 3;               // node hosts, besides the origin (1..200)
  std::string link_rate;       // tbf rate of each node link, e.g. "1gbit"; empty = unshaped
  bool allow_fallback = true;  // loopback when namespaces cannot be made (else Unavailable)
};

class NetnsCluster {
 public:
  // The origin's host index; nodes are 0..nodes()-1.
  static constexpr int kOrigin = -1;

  // Builds the namespaces, links and addresses (or the loopback fallback).
  static Result<std::unique_ptr<NetnsCluster>> Create(NetnsOptions options);

  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  int nodes() const { return options_.nodes; }
  // True when every host has a namespace of its own.
  bool isolated() const { return isolated_; }
  // Why there are no namespaces (empty when isolated()).
  const std::string& fallback_reason() const { return fallback_reason_; }
  // The address of a host (kOrigin or a node index).
  std::string ip(int host) const;
  // The namespace name of a host (empty in the fallback).
  std::string ns_name(int host) const;
  // A TCP port on `host` for a service: fixed in a namespace (nothing else
  // runs there), a free loopback port in the fallback.
  int PortFor(int host, int preferred) const;

  // argv run in the network namespace of `host` (argv itself in the fallback).
  std::vector<std::string> Wrap(int host, const std::vector<std::string>& argv) const;

  // Starts argv in `host`'s network namespace in a session of its own, stdin
  // /dev/null, stdout and stderr appended to `log_path`. The process is owned
  // by this object until Kill(). Internal error when it cannot be spawned.
  Result<pid_t> Spawn(int host, const std::vector<std::string>& argv, const std::string& log_path);
  // `signal` to the process group and the process, then, for SIGKILL or when
  // it exits within `grace`, reaps it; SIGKILL after `grace` otherwise. Returns
  // the exit status as RunProcess reports it (128+N for signal N).
  int Kill(pid_t pid, int signal, std::chrono::seconds grace = std::chrono::seconds(10));
  // True while `pid` (started by Spawn) has not exited.
  bool Running(pid_t pid);
  // Runs argv in `host`'s namespace to completion (RunProcess).
  ProcessResult Run(int host, const std::vector<std::string>& argv,
                    std::chrono::seconds deadline = std::chrono::seconds(60)) const;

 private:
  explicit NetnsCluster(NetnsOptions options) : options_(std::move(options)) {}
  Status Build();
  void Teardown();

  NetnsOptions options_;
  bool isolated_ = false;
  std::string fallback_reason_;
  std::string tag_;                      // "g<pid><seq>": prefix of every name
  std::string subnet_;                   // "10.X.Y."
  std::vector<std::string> namespaces_;  // created, to delete
  std::vector<std::string> links_;       // host-side veths and the bridge, to delete
  std::mutex mu_;                        // guards children_
  std::set<pid_t> children_;             // spawned and not yet reaped
};

// Polls until ip:port accepts a TCP connection from this process or
// `deadline` passes.
Status WaitForTcp(const std::string& ip, int port, std::chrono::seconds deadline);

// An HTTP GET from this process (curl), the body or the failure.
Result<std::string> HttpGet(const std::string& url,
                            std::chrono::seconds deadline = std::chrono::seconds(10));

}  // namespace granary::testing
