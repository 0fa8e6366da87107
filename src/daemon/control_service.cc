// DaemonServices (see control_service.h).
#include "daemon/control_service.h"

#include "common/log.h"

namespace granary {

DaemonServices::DaemonServices(CacheEngine* engine, ServicesOptions options,
                               std::function<FuseStats()> fuse_stats, std::function<Result<nlohmann::json>()> sync)
    : engine_(engine),
      options_(std::move(options)),
      fuse_stats_(std::move(fuse_stats)),
      sync_(std::move(sync)),
      loads_(engine),
      reporter_(engine, &loads_, options_.mountpoint, fuse_stats_, options_.read_mode) {}

Result<std::unique_ptr<DaemonServices>> DaemonServices::Start(CacheEngine* engine,
                                                              ServicesOptions options,
                                                              std::function<FuseStats()> fuse_stats,
                                                              std::function<Result<nlohmann::json>()> sync) {
  if (options.mountpoint.empty() && options.socket_path.empty()) {
    return InvalidArgument("services: mountpoint (or socket_path) is required");
  }
  auto s = std::unique_ptr<DaemonServices>(
      new DaemonServices(engine, std::move(options), std::move(fuse_stats), std::move(sync)));
  const ServicesOptions& o = s->options_;
  if (!o.metrics_addr.empty()) {
    DaemonServices* self = s.get();
    ASSIGN_OR_RETURN(s->metrics_, MetricsServer::Start(o.metrics_addr, [self] {
                       MetricsInput in{.dataset = self->engine_->snapshot()->source_uri(),
                                       .engine = self->engine_->stats(),
                                       .store = self->engine_->store().stats()};
                       if (self->fuse_stats_) in.fuse = self->fuse_stats_();
                       if (auto job = self->loads_.current()) in.load = job->progress();
                       return RenderMetrics(in);
                     }));
  }
  std::string path =
      o.socket_path.empty() ? ControlSocketPath(o.run_dir, o.mountpoint) : o.socket_path;
  ASSIGN_OR_RETURN(s->control_, ControlServer::Start(ControlOptions{.socket_path = path}, s.get()));
  if (o.load_on_start) {
    auto job = s->loads_.Start(LoadRequest{.threads = o.load_threads});
    if (!job.ok()) return job.status().WithContext("background load");
    GLOG_INFO("load: background warm-up of {} files started", (*job)->progress().files_total);
  }
  return s;
}

DaemonServices::~DaemonServices() {
  control_.reset();
  if (auto job = loads_.current()) job->Cancel();
  metrics_.reset();
}

Result<nlohmann::json> DaemonServices::GetStatus() { return StatusToJson(reporter_.Compute()); }

Result<std::shared_ptr<LoadJob>> DaemonServices::StartLoad(const LoadRequest& request) {
  return loads_.Start(request);
}

Status DaemonServices::CancelLoad() { return loads_.Cancel(); }

Result<nlohmann::json> DaemonServices::Sync() {
  if (!sync_) return Unimplemented("sync is not available in this daemon");
  return sync_();
}

std::string DaemonServices::metrics_addr() const {
  return metrics_ ? metrics_->address() : std::string();
}

}  // namespace granary
