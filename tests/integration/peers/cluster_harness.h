// What the cluster integration tests run on top of a NetnsCluster: a
// generated dataset, the origin (moto_server in the origin namespace, whose
// request log counts GETs per object at the origin side), etcd, Granary nodes
// (`granary mount --foreground` in a node namespace), epochs of whole-file
// reads that check every byte, and /metrics parsing.
//
// Every process is started through the NetnsCluster (so it is killed by PID
// at the latest when that is destroyed); every FUSE mount is undone by
// GranaryNode::Stop(), which the tests call from TearDown.
//
// Thread safety: ReadEpoch runs its own reader threads; everything else is
// used by the test's thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "netns.h"

namespace granary::testing {

// Relative key -> bytes.
using Dataset = std::map<std::string, std::string>;

// `small` files of 2-100 KB and `large` ones of 1.2-4.5 blocks (the blocks are
// placed one by one), deterministic for `seed`.
Dataset MakeDataset(int small, int large, uint64_t block_size, uint32_t seed);

// Origin GETs one full read of `data` needs: one per block of every object.
uint64_t BlocksOf(const Dataset& data, uint64_t block_size);

// moto_server in the origin's namespace. Its request log is the origin-side
// count: GetsPerKey() parses it.
class Origin {
 public:
  static Result<std::unique_ptr<Origin>> Start(NetnsCluster* net, const std::string& log_dir);
  ~Origin();

  // "http://IP:PORT".
  const std::string& endpoint() const { return endpoint_; }
  // Creates `bucket` and uploads every object under `prefix` (8 threads).
  Status Upload(const std::string& bucket, const std::string& prefix, const Dataset& data);
  // GET requests answered 200/206 per object key (bucket and prefix removed;
  // listings and other queries are not counted) since the server started.
  std::map<std::string, uint64_t> GetsPerKey() const;

 private:
  Origin() = default;
  NetnsCluster* net_ = nullptr;
  pid_t pid_ = -1;
  std::string endpoint_;
  std::string log_path_;
  std::string strip_;  // "/bucket/prefix/" removed from logged paths
};

// GetsPerKey() after minus before, keys with zero left out.
std::map<std::string, uint64_t> Delta(const std::map<std::string, uint64_t>& after,
                                      const std::map<std::string, uint64_t>& before);
uint64_t Sum(const std::map<std::string, uint64_t>& counts);

// A one-member etcd (Debian's etcd-server) in `host`'s namespace.
class Etcd {
 public:
  static Result<std::unique_ptr<Etcd>> Start(NetnsCluster* net, int host, const std::string& dir);
  ~Etcd();
  // "http://IP:PORT" for clients.
  const std::string& endpoint() const { return endpoint_; }

 private:
  Etcd() = default;
  NetnsCluster* net_ = nullptr;
  pid_t pid_ = -1;
  std::string endpoint_;
};

// A TCP listener in `host`'s namespace that accepts connections and never
// answers (python3), started through the NetnsCluster.
Result<pid_t> StartSilentPeer(NetnsCluster* net, int host, int port, const std::string& log_path);

// One `granary mount --foreground` (or `granary worker`) in a node namespace.
struct GranaryNode {
  NetnsCluster* net = nullptr;
  int host = 0;
  std::string source;    // s3://bucket/prefix
  std::string endpoint;  // the origin
  std::string dir;       // mnt/, cache/, run/ and daemon.log live here
  std::string block_size = "256KiB";
  int cluster_port = 0;  // --cluster-listen port
  int metrics_port = 0;  // --metrics-addr port
  bool worker = false;   // `granary worker SOURCE`: no mount; ready when its metrics answer
  pid_t pid = -1;
  std::vector<std::string> args;  // the extra flags of the last Start()

  std::string mountpoint() const { return dir + "/mnt"; }
  std::string cache_dir() const { return dir + "/cache"; }
  std::string run_dir() const { return dir + "/run"; }
  std::string log_path() const { return dir + "/daemon.log"; }
  std::string cluster_addr() const;  // "IP:PORT"
  std::string metrics_url() const;   // "http://IP:PORT/metrics"

  // Starts the daemon with `extra` flags and waits (60 s) until it is
  // mounted (a worker: serving its metrics); Unavailable with the log's
  // tail when it exits or times out.
  Status Start(const std::vector<std::string>& extra);
  // SIGKILL, like a crash; the mount stays (dead) until Stop() or Start().
  void Crash();
  // SIGTERM (then SIGKILL), and unmounts what is left. Safe to repeat.
  void Stop();
  // Whether the daemon started last still runs (false once it exited).
  bool Running() const;
  // The last `n` lines of the daemon's log.
  std::string LogTail(int n = 20) const;
  std::string Log() const;
};

// `count` nodes of one cluster over `source`, node i on host i of `net`
// under DIR/node<i>, with its peer (7000) and metrics (9100) ports; not started.
std::vector<GranaryNode> MakeNodes(NetnsCluster* net, int count, const std::string& source,
                                   const std::string& endpoint, const std::string& dir);

// Stops every node at once (SIGTERM to all, then each waited for), as an
// operator stops a whole cluster: no member waits for the others to take
// over its share, since they are leaving too.
void StopAll(std::vector<GranaryNode>& nodes);

// Whole-file reads of `keys` from `mountpoint`, each checked against `data`.
struct EpochResult {
  uint64_t reads = 0;
  uint64_t failures = 0;                  // open/read errors
  uint64_t mismatches = 0;                // wrong size or bytes
  std::vector<std::string> first_errors;  // up to 5, "key: what"
  std::chrono::microseconds max_latency{0};
  std::chrono::microseconds max_latency_single_block{0};  // objects up to one block
  double seconds = 0;
};

struct EpochOptions {
  int threads = 4;
  uint32_t seed = 1;                // shuffle order
  uint64_t block_size = 256 << 10;  // to tell single-block objects apart
  // Called after every read with the count so far (from reader threads).
  std::function<void(uint64_t)> on_read;
};

EpochResult ReadEpoch(const std::string& mountpoint, const Dataset& data,
                      const std::vector<std::string>& keys, const EpochOptions& options);

// The sum of every sample of metric `name` (any labels) whose label text
// contains `label_part`; -1 when no such sample exists.
double MetricSum(const std::string& metrics_text, const std::string& name,
                 const std::string& label_part = "");

// True when the built `granary mount --help` lists the cluster flags.
bool HasClusterFlags(const std::string& granary);

}  // namespace granary::testing
