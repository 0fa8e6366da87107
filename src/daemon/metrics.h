// Prometheus metrics of a mount daemon (`--metrics-addr HOST:PORT`): a tiny
// HTTP/1.1 server answering GET /metrics with the text exposition format
// (version 0.0.4), rendered from the daemon's counters at each scrape. Every
// metric is documented in docs/metrics.md.
//
// Thread safety: MetricsServer runs one thread that serves connections one at
// a time (a scrape is small and fast); the render callback is called on that
// thread. RenderMetrics is a pure function.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "api/service.h"
#include "cache/engine.h"
#include "cluster/cluster_node.h"
#include "control/loader.h"
#include "fuse/fuse_server.h"
#include "granary/status.h"
#include "meta/overlay.h"
#include "store/store.h"

namespace granary {

// Everything one scrape shows.
struct MetricsInput {
  std::string dataset;  // source URI: the "dataset" label of every sample
  EngineStats engine;
  StoreStats store;
  std::optional<FuseStats> fuse;            // absent without a mount
  std::optional<LoadProgress> load;         // the running or last load
  std::optional<ClusterStats> cluster;      // absent on a single node
  std::optional<OverlayStats> writes;       // absent unless the mount is writable
  std::optional<ApiService::Counters> api;  // the attach socket's (Client::Attach)
};

// The text exposition of `in`.
std::string RenderMetrics(const MetricsInput& in);

class MetricsServer {
 public:
  // Listens on "HOST:PORT" (port 0: a free one). InvalidArgument for a bad
  // address; IoError when it cannot bind. `render` is called per scrape.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& addr,
                                                      std::function<std::string()> render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // "host:port" actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  MetricsServer(int fd, int wake_fd, std::string address, int port,
                std::function<std::string()> render);
  void Loop();
  void ServeOne(int fd);

  int fd_;
  int wake_fd_;
  std::string address_;
  int port_;
  std::function<std::string()> render_;
  std::thread thread_;
};

}  // namespace granary
