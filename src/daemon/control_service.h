// DaemonServices: what a mount daemon hosts besides FUSE: its socket (the
// client API and the control ops: status / load / cancel / sync / cluster
// status / drain; api/server.h), the one-at-a-time LoadManager
// (foreground loads from `granary load`, background ones from `mount --load`
// and `load --background`), the StatusReporter, and the Prometheus endpoint
// (`--metrics-addr`). The daemon calls StartServices() once its engine serves
// and destroys the result before the engine.
//
// Thread safety: ControlHandler methods are called from connection threads
// concurrently; each delegates to a thread-safe component.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "api/server.h"
#include "api/service.h"
#include "cache/engine.h"
#include "common/origin_defaults.h"
#include "control/control.h"
#include "control/loader.h"
#include "control/status.h"
#include "daemon/metrics.h"
#include "fuse/fuse_server.h"

namespace granary {

class ClusterNode;

struct ServicesOptions {
  // Run directory of the socket (DaemonSocketPath(run_dir, mountpoint)).
  std::string run_dir = "/run/granary";
  // The mount point (names the socket; shown in status). Required.
  std::string mountpoint;
  // Explicit socket path; "" = DaemonSocketPath(run_dir, mountpoint).
  std::string socket_path;
  // The mount's read mode ("cached" | "passthrough"; "" = no mount), shown
  // in status: in cached mode re-reads never reach the daemon.
  std::string read_mode;
  // "HOST:PORT" for Prometheus metrics; "" = off. Port 0 picks a free port.
  std::string metrics_addr;
  // Start a background load of the whole dataset (`mount --load`).
  bool load_on_start = false;
  // Fetch threads of that background load.
  int load_threads = kDefaultOriginConcurrency;
  // The dataset's cluster membership and peers (null on a single node):
  // `status --cluster`, cluster metrics, peers' status requests.
  ClusterNode* cluster = nullptr;
  // A writable mount's overlay counters (status "writes", granary_write_*
  // metrics); empty = read-only.
  std::function<OverlayStats()> write_stats;
  // Starts the daemon's graceful leave and stop (`granary worker --drain`);
  // empty = Unimplemented. Called again while draining: must do nothing.
  std::function<Status()> request_drain;
};

class DaemonServices : public LocalControl {
 public:
  // Borrows engine (must outlive the services). fuse_stats: FUSE counters (may
  // be empty). sync: `granary sync` (may be empty: Unimplemented).
  static Result<std::unique_ptr<DaemonServices>> Start(
      CacheEngine* engine, ServicesOptions options, std::function<FuseStats()> fuse_stats = {},
      std::function<Result<nlohmann::json>()> sync = {});
  // Stops the socket and metrics server, cancels a running load.
  ~DaemonServices() override;

  Result<nlohmann::json> Sync() override;
  Result<nlohmann::json> GetClusterStatus() override;
  Result<nlohmann::json> Drain() override;

  LoadManager& loads() { return loads_; }
  StatusReporter& status() { return reporter_; }
  const std::string& socket_path() const { return server_->socket_path(); }
  // "host:port" the metrics server listens on; "" when off.
  std::string metrics_addr() const;

 private:
  DaemonServices(CacheEngine* engine, ServicesOptions options,
                 std::function<FuseStats()> fuse_stats,
                 std::function<Result<nlohmann::json>()> sync);

  CacheEngine* engine_;
  ServicesOptions options_;
  std::function<FuseStats()> fuse_stats_;
  std::function<Result<nlohmann::json>()> sync_;
  LoadManager loads_;
  StatusReporter reporter_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<ApiService> api_service_;  // Client::Attach (include/granary/client.h)
  std::unique_ptr<ApiServer> server_;        // stopped first
  std::string legacy_api_link_;              // "<socket>.api.sock" -> the socket ("" = none)
};

// What the daemon calls (see DaemonServices::Start).
inline Result<std::unique_ptr<DaemonServices>> StartServices(
    CacheEngine* engine, ServicesOptions options, std::function<FuseStats()> fuse_stats = {},
    std::function<Result<nlohmann::json>()> sync = {}) {
  return DaemonServices::Start(engine, std::move(options), std::move(fuse_stats), std::move(sync));
}

}  // namespace granary
