// Origin, etcd, Granary nodes, epochs and metrics for the cluster tests.
#include "cluster_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "daemon/daemon.h"
#include "fuse/fuse_server.h"
#include "ufs/s3_ufs.h"

namespace granary::testing {
namespace fs = std::filesystem;

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, int n) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size();
       ++i) {
    out += lines[i] + "\n";
  }
  return out;
}

}  // namespace

Dataset MakeDataset(int small, int large, uint64_t block_size, uint32_t seed) {
  Dataset d;
  std::mt19937 rng(seed);
  for (int i = 0; i < small; ++i) {
    std::string key = "train/c" + std::to_string(i % 37) + "/img" + std::to_string(i) + ".jpg";
    d[key] = RandomBytes(2000 + rng() % 98000, seed * 100000 + i);
  }
  for (int i = 0; i < large; ++i) {
    uint64_t size = block_size + block_size / 5 + rng() % (block_size * 33 / 10);
    d["big/blob" + std::to_string(i) + ".bin"] = RandomBytes(size, seed * 100000 + small + i);
  }
  return d;
}

uint64_t BlocksOf(const Dataset& data, uint64_t block_size) {
  uint64_t n = 0;
  for (const auto& [key, bytes] : data)
    n += std::max<uint64_t>(1, (bytes.size() + block_size - 1) / block_size);
  return n;
}

// ---------------------------------------------------------------------------
// Origin

Result<std::unique_ptr<Origin>> Origin::Start(NetnsCluster* net, const std::string& log_dir) {
  std::unique_ptr<Origin> o(new Origin());
  o->net_ = net;
  o->log_path_ = log_dir + "/moto_server.log";
  const std::string ip = net->ip(NetnsCluster::kOrigin);
  int port = net->PortFor(NetnsCluster::kOrigin, 9000);
  ::setenv("PYTHONUNBUFFERED", "1", 1);
  ASSIGN_OR_RETURN(o->pid_,
                   net->Spawn(NetnsCluster::kOrigin,
                              {"moto_server", "-H", ip, "-p", std::to_string(port)}, o->log_path_));
  o->endpoint_ = "http://" + ip + ":" + std::to_string(port);
  Status up = WaitForTcp(ip, port, std::chrono::seconds(60));
  if (!up.ok())
    return Unavailable("moto_server: " + up.message() + ": " + Tail(ReadText(o->log_path_), 5));
  return o;
}

Origin::~Origin() {
  if (pid_ > 0) net_->Kill(pid_, SIGTERM, std::chrono::seconds(5));
}

Status Origin::Upload(const std::string& bucket, const std::string& prefix, const Dataset& data) {
  strip_ = "/" + bucket + "/" + prefix + "/";
  ASSIGN_OR_RETURN(Uri uri, ParseUri("s3://" + bucket));
  ASSIGN_OR_RETURN(auto ufs, NewS3Ufs(uri, UfsOptions{.options = {{"endpoint", endpoint_}}}));
  auto* s3 = dynamic_cast<S3Ufs*>(ufs.get());
  if (s3 == nullptr) return Internal("NewS3Ufs did not return an S3Ufs");
  RETURN_IF_ERROR(s3->CreateBucket());
  std::vector<const std::pair<const std::string, std::string>*> items;
  for (const auto& kv : data) items.push_back(&kv);
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first = Status::Ok();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < items.size(); i = next++) {
        Status s = s3->PutObject(prefix + "/" + items[i]->first, items[i]->second);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first.ok()) first = s;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return first;
}

std::map<std::string, uint64_t> Origin::GetsPerKey() const {
  // werkzeug: `IP - - [date] "GET /bucket/prefix/key HTTP/1.1" 200 -`
  std::map<std::string, uint64_t> counts;
  std::istringstream in(ReadText(log_path_));
  for (std::string line; std::getline(in, line);) {
    size_t start = line.find("\"GET ");
    if (start == std::string::npos) continue;
    start += 5;
    size_t end = line.find(" HTTP/", start);
    if (end == std::string::npos) continue;
    std::string path = line.substr(start, end - start);
    size_t quote = line.find('"', end);
    if (quote == std::string::npos) continue;
    int status = std::atoi(line.c_str() + quote + 1);
    if ((status != 200 && status != 206) || path.find('?') != std::string::npos) continue;
    if (!path.starts_with(strip_)) continue;
    ++counts[path.substr(strip_.size())];
  }
  return counts;
}

std::map<std::string, uint64_t> Delta(const std::map<std::string, uint64_t>& after,
                                      const std::map<std::string, uint64_t>& before) {
  std::map<std::string, uint64_t> d;
  for (const auto& [k, v] : after) {
    auto it = before.find(k);
    uint64_t b = it == before.end() ? 0 : it->second;
    if (v > b) d[k] = v - b;
  }
  return d;
}

uint64_t Sum(const std::map<std::string, uint64_t>& counts) {
  uint64_t n = 0;
  for (const auto& [k, v] : counts) n += v;
  return n;
}

// ---------------------------------------------------------------------------
// etcd

Result<std::unique_ptr<Etcd>> Etcd::Start(NetnsCluster* net, int host, const std::string& dir) {
  std::unique_ptr<Etcd> e(new Etcd());
  e->net_ = net;
  const std::string ip = net->ip(host);
  int client = net->PortFor(host, 2379), peer = net->PortFor(host, 2380);
  const std::string curl = "http://" + ip + ":" + std::to_string(client);
  const std::string purl = "http://" + ip + ":" + std::to_string(peer);
  fs::create_directories(dir);
  ASSIGN_OR_RETURN(e->pid_,
                   net->Spawn(host,
                              {"etcd", "--name", "gtest", "--data-dir", dir + "/data",
                               "--listen-client-urls", curl, "--advertise-client-urls", curl,
                               "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                               "--initial-cluster", "gtest=" + purl, "--log-level", "warn"},
                              dir + "/etcd.log"));
  e->endpoint_ = curl;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    Result<std::string> h = HttpGet(curl + "/health", std::chrono::seconds(2));
    if (h.ok() && h->find("true") != std::string::npos) return e;
    if (!net->Running(e->pid_)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling an external server
  }
  return Unavailable("etcd did not become healthy: " + Tail(ReadText(dir + "/etcd.log"), 5));
}

Etcd::~Etcd() {
  if (pid_ > 0) net_->Kill(pid_, SIGTERM, std::chrono::seconds(5));
}

Result<pid_t> StartSilentPeer(NetnsCluster* net, int host, int port, const std::string& log_path) {
  const std::string script =
      "import socket,sys\n"
      "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1024)\n"
      "print('listening', flush=True)\n"
      "held=[]\n"
      "while True:\n"
      "    c,_=s.accept(); held.append(c)\n";
  ASSIGN_OR_RETURN(
      pid_t pid,
      net->Spawn(host, {"python3", "-c", script, net->ip(host), std::to_string(port)}, log_path));
  RETURN_IF_ERROR(WaitForTcp(net->ip(host), port, std::chrono::seconds(20)));
  return pid;
}

// ---------------------------------------------------------------------------
// GranaryNode

std::string GranaryNode::cluster_addr() const {
  return net->ip(host) + ":" + std::to_string(cluster_port);
}

std::string GranaryNode::metrics_url() const {
  return "http://" + net->ip(host) + ":" + std::to_string(metrics_port) + "/metrics";
}

Status GranaryNode::Start(const std::vector<std::string>& extra) {
  Stop();  // a crashed predecessor's dead mount
  args = extra;
  fs::create_directories(mountpoint());
  fs::create_directories(run_dir());
  std::vector<std::string> argv = {GRANARY_CLI_PATH, "worker", source};
  if (!worker) argv = {GRANARY_CLI_PATH, "mount", source, mountpoint(), "--foreground"};
  if (!worker) argv.insert(argv.end(), {"--fuse-threads", "8"});
  for (const std::string& a :
       {std::string("--endpoint"), endpoint, std::string("--cache-dir"), cache_dir() + ":2G",
        std::string("--block-size"), block_size, std::string("--run-dir"), run_dir(),
        std::string("--metrics-addr"), net->ip(host) + ":" + std::to_string(metrics_port)}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  {
    std::ofstream log(log_path(), std::ios::app);
    log << "==== start:";
    for (const auto& a : argv) log << " " << a;
    log << "\n";
  }
  ASSIGN_OR_RETURN(pid, net->Spawn(host, argv, log_path()));
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    if (worker ? HttpGet(metrics_url(), std::chrono::seconds(1)).ok()
               : IsMountpoint(mountpoint())) {
      return Status::Ok();
    }
    if (!net->Running(pid)) {
      pid = -1;
      return Unavailable("node " + std::to_string(host) + " exited before mounting: " + LogTail(8));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling the mount table
  }
  return Unavailable("node " + std::to_string(host) + " not mounted after 60 s: " + LogTail(8));
}

void GranaryNode::Crash() {
  if (pid > 0) net->Kill(pid, SIGKILL);
  pid = -1;
}

void GranaryNode::Stop() {
  if (pid > 0) net->Kill(pid, SIGTERM, std::chrono::seconds(20));
  pid = -1;
  for (int i = 0; i < 3 && IsMountpoint(mountpoint()); ++i) UnmountFuse(mountpoint()).IgnoreError();
}

bool GranaryNode::Running() const { return pid > 0 && net->Running(pid); }

std::vector<GranaryNode> MakeNodes(NetnsCluster* net, int count, const std::string& source,
                                   const std::string& endpoint, const std::string& dir) {
  std::vector<GranaryNode> nodes;
  for (int i = 0; i < count; ++i) {
    nodes.push_back(GranaryNode{.net = net,
                                .host = i,
                                .source = source,
                                .endpoint = endpoint,
                                .dir = dir + "/node" + std::to_string(i),
                                .cluster_port = net->PortFor(i, 7000),
                                .metrics_port = net->PortFor(i, 9100)});
  }
  return nodes;
}

void StopAll(std::vector<GranaryNode>& nodes) {
  std::vector<std::thread> stops;
  for (GranaryNode& n : nodes) stops.emplace_back([&n] { n.Stop(); });
  for (std::thread& t : stops) t.join();
}

std::string GranaryNode::Log() const { return ReadText(log_path()); }

std::string GranaryNode::LogTail(int n) const { return Tail(Log(), n); }

// ---------------------------------------------------------------------------
// Epochs

EpochResult ReadEpoch(const std::string& mountpoint, const Dataset& data,
                      const std::vector<std::string>& keys, const EpochOptions& options) {
  std::vector<std::string> order = keys;
  std::mt19937 rng(options.seed);
  std::shuffle(order.begin(), order.end(), rng);
  EpochResult r;
  std::mutex mu;  // guards r's non-atomic fields
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&] {
      std::string buf;
      for (size_t i = next++; i < order.size(); i = next++) {
        const std::string& key = order[i];
        const std::string& want = data.at(key);
        auto start = std::chrono::steady_clock::now();
        std::string error;
        int fd = ::open((mountpoint + "/" + key).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          error = std::string("open: ") + std::strerror(errno);
        } else {
          buf.resize(want.size() + 1);
          size_t got = 0;
          for (;;) {
            ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
            if (n < 0) {
              error = std::string("read: ") + std::strerror(errno);
              break;
            }
            if (n == 0) break;
            got += static_cast<size_t>(n);
            if (got == buf.size()) buf.resize(buf.size() * 2);
          }
          // Later epochs must reach the daemon again, not this page cache.
          ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
          ::close(fd);
          if (error.empty() &&
              (got != want.size() || std::memcmp(buf.data(), want.data(), got) != 0)) {
            error =
                "mismatch: " + std::to_string(got) + " bytes, want " + std::to_string(want.size());
          }
        }
        auto took = std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - start);
        {
          std::lock_guard<std::mutex> lock(mu);
          ++r.reads;
          r.max_latency = std::max(r.max_latency, took);
          if (want.size() <= options.block_size) {
            r.max_latency_single_block = std::max(r.max_latency_single_block, took);
          }
          if (!error.empty()) {
            (error.starts_with("mismatch") ? r.mismatches : r.failures)++;
            if (r.first_errors.size() < 5) r.first_errors.push_back(key + ": " + error);
          }
        }
        uint64_t n = ++done;
        if (options.on_read) options.on_read(n);
      }
    });
  }
  for (auto& t : threads) t.join();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// ---------------------------------------------------------------------------
// Metrics and flags

double MetricSum(const std::string& metrics_text, const std::string& name,
                 const std::string& label_part) {
  double sum = 0;
  bool found = false;
  std::istringstream in(metrics_text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || !line.starts_with(name)) continue;
    std::string rest = line.substr(name.size());
    std::string labels;
    if (!rest.empty() && rest[0] == '{') {
      size_t close = rest.find('}');
      if (close == std::string::npos) continue;
      labels = rest.substr(0, close + 1);
      rest = rest.substr(close + 1);
    }
    if (rest.empty() || rest[0] != ' ') continue;  // a longer name with this prefix
    if (!label_part.empty() && labels.find(label_part) == std::string::npos) continue;
    sum += std::strtod(rest.c_str(), nullptr);
    found = true;
  }
  return found ? sum : -1;
}

bool HasClusterFlags(const std::string& granary) {
  ProcessResult r = RunProcess({granary, "mount", "--help"}, std::chrono::seconds(20));
  return (r.out + r.err).find("--cluster-listen") != std::string::npos;
}

}  // namespace granary::testing
