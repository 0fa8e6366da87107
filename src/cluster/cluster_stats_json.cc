// ClusterStats <-> JSON (see cluster_stats_json.h).
#include "cluster/cluster_stats_json.h"

#include <array>

#include "common/json_fields.h"

namespace granary {
namespace {

// Every counter, once: both directions read these tables.
constexpr std::array kClusterCounters = {
    JsonCounter<ClusterStats>{"members", &ClusterStats::members},
    JsonCounter<ClusterStats>{"placement_generation", &ClusterStats::placement_generation},
};
constexpr std::array kHandoverCounters = {
    JsonCounter<HandoverStats>{"previous_sets", &HandoverStats::previous_sets},
    JsonCounter<HandoverStats>{"objects_total", &HandoverStats::objects_total},
    JsonCounter<HandoverStats>{"objects_checked", &HandoverStats::objects_checked},
    JsonCounter<HandoverStats>{"passes", &HandoverStats::passes},
    JsonCounter<HandoverStats>{"blocks", &HandoverStats::blocks},
    JsonCounter<HandoverStats>{"bytes", &HandoverStats::bytes},
};
using net::PeerServerStats;
constexpr std::array kServerCounters = {
    JsonCounter<PeerServerStats>{"connections_accepted", &PeerServerStats::connections_accepted},
    JsonCounter<PeerServerStats>{"connections_refused", &PeerServerStats::connections_refused},
    JsonCounter<PeerServerStats>{"connections_open", &PeerServerStats::connections_open},
    JsonCounter<PeerServerStats>{"auth_failures", &PeerServerStats::auth_failures},
    JsonCounter<PeerServerStats>{"protocol_errors", &PeerServerStats::protocol_errors},
    JsonCounter<PeerServerStats>{"busy_rejections", &PeerServerStats::busy_rejections},
    JsonCounter<PeerServerStats>{"service_errors", &PeerServerStats::service_errors},
    JsonCounter<PeerServerStats>{"bytes_sent", &PeerServerStats::bytes_sent},
};

nlohmann::json ServerToJson(const PeerServerStats& s) {
  nlohmann::json j = nlohmann::json::object();
  PutCounters(j, s, kServerCounters);
  j["requests_by_op"] = s.requests_by_op;
  return j;
}

Result<PeerServerStats> ServerFromJson(const nlohmann::json& j) {
  PeerServerStats s;
  JsonFields in(j, "cluster stats: server");
  in.GetCounters(s, kServerCounters);
  in.Get("requests_by_op", s.requests_by_op);
  RETURN_IF_ERROR(in.status());
  return s;
}

}  // namespace

nlohmann::json ToJson(const DrainStats& d) {
  return {{"state", d.state},
          {"elapsed_s", d.elapsed_s},
          {"timeout_s", d.timeout_s},
          {"waiting", d.waiting}};
}

nlohmann::json ToJson(const ClusterStats& s) {
  nlohmann::json j = nlohmann::json::object();
  j["self"] = s.self;
  j["address"] = s.address;
  j["membership"] = s.membership;
  PutCounters(j, s, kClusterCounters);
  j["member_ids"] = s.member_ids;
  j["leaving"] = s.leaving;
  j["drain"] = ToJson(s.drain);
  nlohmann::json handover = nlohmann::json::object();
  PutCounters(handover, s.handover, kHandoverCounters);
  j["handover"] = std::move(handover);
  j["peer_errors"] = s.peer_errors;
  j["peer_latency_buckets"] = s.peer_latency_buckets;
  j["peer_latency_sum_s"] = s.peer_latency_sum_s;
  j["server"] = ServerToJson(s.server);
  return j;
}

Result<ClusterStats> ClusterStatsFromJson(const nlohmann::json& j) {
  ClusterStats s;
  JsonFields in(j, "cluster stats");
  in.Get("self", s.self);
  in.Get("address", s.address);
  in.Get("membership", s.membership);
  in.GetCounters(s, kClusterCounters);
  in.Get("member_ids", s.member_ids);
  in.Get("leaving", s.leaving);
  in.Get("peer_errors", s.peer_errors);
  in.Get("peer_latency_buckets", s.peer_latency_buckets);
  in.Get("peer_latency_sum_s", s.peer_latency_sum_s);
  RETURN_IF_ERROR(in.status());
  if (!s.peer_latency_buckets.empty() &&
      s.peer_latency_buckets.size() != net::kPeerLatencyBuckets) {
    return InvalidArgument("cluster stats: field 'peer_latency_buckets' has " +
                           std::to_string(s.peer_latency_buckets.size()) + " buckets, not " +
                           std::to_string(net::kPeerLatencyBuckets));
  }
  if (const nlohmann::json* handover = in.Find("handover")) {
    JsonFields h(*handover, "cluster stats: handover");
    h.GetCounters(s.handover, kHandoverCounters);
    RETURN_IF_ERROR(h.status());
  }
  if (const nlohmann::json* drain = in.Find("drain")) {
    JsonFields d(*drain, "cluster stats: drain");
    d.Get("state", s.drain.state);
    d.Get("elapsed_s", s.drain.elapsed_s);
    d.Get("timeout_s", s.drain.timeout_s);
    d.Get("waiting", s.drain.waiting);
    RETURN_IF_ERROR(d.status());
  }
  if (const nlohmann::json* server = in.Find("server")) {
    ASSIGN_OR_RETURN(s.server, ServerFromJson(*server));
  }
  return s;
}

}  // namespace granary
