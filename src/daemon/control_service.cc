// DaemonServices (see control_service.h).
#include "daemon/control_service.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cluster/cluster_node.h"
#include "cluster/cluster_stats_json.h"
#include "common/log.h"

namespace granary {

DaemonServices::DaemonServices(CacheEngine* engine, ServicesOptions options,
                               std::function<FuseStats()> fuse_stats,
                               std::function<Result<nlohmann::json>()> sync)
    : LocalControl(&loads_, &reporter_),
      engine_(engine),
      options_(std::move(options)),
      fuse_stats_(std::move(fuse_stats)),
      sync_(std::move(sync)),
      loads_(engine),
      reporter_(engine, &loads_, options_.mountpoint, fuse_stats_, options_.read_mode) {}

Result<std::unique_ptr<DaemonServices>> DaemonServices::Start(
    CacheEngine* engine, ServicesOptions options, std::function<FuseStats()> fuse_stats,
    std::function<Result<nlohmann::json>()> sync) {
  if (options.mountpoint.empty() && options.socket_path.empty()) {
    return InvalidArgument("services: mountpoint (or socket_path) is required");
  }
  auto s = std::unique_ptr<DaemonServices>(
      new DaemonServices(engine, std::move(options), std::move(fuse_stats), std::move(sync)));
  const ServicesOptions& o = s->options_;
  if (o.write_stats) s->reporter_.SetWriteStats(o.write_stats);
  // Before the metrics server, whose scrapes read its counters.
  s->api_service_ = std::make_unique<ApiService>(engine);
  if (!o.metrics_addr.empty()) {
    DaemonServices* self = s.get();
    ASSIGN_OR_RETURN(s->metrics_, MetricsServer::Start(o.metrics_addr, [self] {
                       MetricsInput in{.dataset = self->engine_->snapshot()->source_uri(),
                                       .engine = self->engine_->stats(),
                                       .store = self->engine_->store().stats()};
                       if (self->fuse_stats_) in.fuse = self->fuse_stats_();
                       if (auto job = self->loads_.current()) in.load = job->progress();
                       if (self->options_.cluster) in.cluster = self->options_.cluster->stats();
                       if (self->options_.write_stats) in.writes = self->options_.write_stats();
                       in.api = self->api_service_->counters();
                       return RenderMetrics(in);
                     }));
  }
  if (o.cluster) {
    // Peers asking this node's status (status --cluster) get what `granary
    // status --json` shows here.
    DaemonServices* self = s.get();
    o.cluster->SetStatusProvider([self] { return self->GetStatus(); });
  }
  std::string path =
      o.socket_path.empty() ? DaemonSocketPath(o.run_dir, o.mountpoint) : o.socket_path;
  ASSIGN_OR_RETURN(s->server_, ApiServer::Start(s->api_service_.get(), s.get(), path));
  // Clients of the API built before the daemon had one socket look for
  // "<name>.api.sock": a link to the socket keeps a training job attached
  // across an upgrade to this daemon.
  if (path.ends_with(".sock")) {
    s->legacy_api_link_ = path.substr(0, path.size() - 5) + ".api.sock";
    ::unlink(s->legacy_api_link_.c_str());
    if (::symlink(std::filesystem::path(path).filename().c_str(), s->legacy_api_link_.c_str()) !=
        0) {
      GLOG_DEBUG("services: link {}: {}", s->legacy_api_link_, std::strerror(errno));
      s->legacy_api_link_.clear();
    }
  }
  if (o.load_on_start) {
    auto job = s->loads_.Start(LoadRequest{.threads = o.load_threads});
    if (!job.ok()) return job.status().WithContext("background load");
    GLOG_INFO("load: background warm-up of {} files started", (*job)->progress().files_total);
  }
  return s;
}

DaemonServices::~DaemonServices() {
  metrics_.reset();  // its scrapes read what follows
  if (options_.cluster) options_.cluster->SetStatusProvider(nullptr);
  if (!legacy_api_link_.empty()) ::unlink(legacy_api_link_.c_str());
  server_.reset();
  api_service_.reset();
  if (auto job = loads_.current()) job->Cancel();
}

Result<nlohmann::json> DaemonServices::Sync() {
  if (!sync_) return Unimplemented("sync is not available in this daemon");
  return sync_();
}

Result<nlohmann::json> DaemonServices::GetClusterStatus() {
  if (!options_.cluster) return ControlHandler::GetClusterStatus();
  nlohmann::json j = options_.cluster->MemberStatuses();
  // Totals over the members that answered: the cluster's cache.
  uint64_t cached = 0, files = 0, capacity = 0, up = 0, hits = 0, reads = 0, origin = 0;
  uint64_t handovers = 0;
  for (const nlohmann::json& m : j["members"]) {
    if (m.value("state", "") != "up") continue;
    if (const nlohmann::json& c = m["status"].value("cluster", nlohmann::json::object());
        c.contains("handover") && c["handover"].value("previous_sets", uint64_t{0}) > 0) {
      ++handovers;
    }
    auto st = StatusFromJson(m["status"]);
    if (!st.ok()) continue;
    ++up;
    // Each block counted at its primary owner: near copies and replicas are
    // not the cluster's cache, and a file split across members counts whole.
    cached += st->owned_block_bytes;
    files += st->owned_cached_files;
    capacity += st->capacity;
    // Reads on the member itself and blocks it served to others (clients of
    // a workers-only cluster read only through the workers).
    hits += st->hit_count() + st->peer_served_hits;
    reads += st->read_count() + st->peer_served_blocks;
    origin += st->origin_requests;
  }
  const DatasetStatus self = reporter_.Compute();
  // Blocks of objects the snapshot no longer lists (an older version) may
  // still be counted by some member.
  cached = std::min(cached, self.ufs_total_bytes);
  j["totals"] = {
      {"members", j["members"].size()},
      {"members_up", up},
      {"ufs_total_bytes", self.ufs_total_bytes},
      {"ufs_files", self.ufs_files},
      {"cached_bytes", cached},
      {"cached_files", files},
      {"capacity", capacity},
      {"cached_ratio", self.ufs_total_bytes
                           ? static_cast<double>(cached) / static_cast<double>(self.ufs_total_bytes)
                           : 1.0},
      {"hit_ratio_reads", reads ? static_cast<double>(hits) / static_cast<double>(reads) : 0.0},
      {"origin_requests", origin},
      {"handovers_in_progress", handovers}};
  return j;
}

Result<nlohmann::json> DaemonServices::Drain() {
  if (!options_.cluster) return ControlHandler::Drain();
  if (!options_.request_drain) return Unimplemented("this daemon cannot drain");
  RETURN_IF_ERROR(options_.request_drain());
  DrainStats d = options_.cluster->stats().drain;
  if (d.state.empty()) d.state = "starting";  // asked; the daemon's stop has not reached it yet
  return ToJson(d);
}

std::string DaemonServices::metrics_addr() const {
  return metrics_ ? metrics_->address() : std::string();
}

}  // namespace granary
