// ClusterNode: membership, placement, peer server and clients (see cluster_node.h).
#include "cluster/cluster_node.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "cache/engine.h"
#include "cluster/cluster_stats_json.h"
#include "cluster/etcd_membership.h"
#include "cluster/node_identity.h"
#include "cluster/static_membership.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/units.h"
#include "net/auth.h"
#include "store/store.h"

namespace granary {
namespace {

using cluster::Member;
using cluster::Placement;

uint64_t StoreCapacity(Store& store) {
  uint64_t total = 0;
  for (const TierStats& t : store.stats().tiers) total += t.quota;
  return total;
}

int64_t NowUnixMs() { return Clock::Real()->WallNanos() / 1'000'000; }

}  // namespace

Status ClusterOptions::Validate() const {
  if (!enabled()) {
    if (!peers.empty() || !peers_file.empty() || !etcd.empty()) {
      return InvalidArgument("--cluster-peers/--cluster-etcd need --cluster-listen HOST:PORT");
    }
    return Status::Ok();
  }
  if (auto hp = cluster::ParseHostPort(listen); !hp.ok()) {
    return InvalidArgument("--cluster-listen: " + hp.status().message());
  }
  if (!advertise.empty()) {
    if (auto hp = cluster::ParseHostPort(advertise); !hp.ok()) {
      return InvalidArgument("--cluster-advertise: " + hp.status().message());
    }
  } else if (listen.starts_with("0.0.0.0:") || listen.starts_with("[::]:")) {
    return InvalidArgument("--cluster-listen " + listen +
                           " is a wildcard address: give --cluster-advertise HOST:PORT");
  }
  if (!peers.empty() && !etcd.empty()) {
    return InvalidArgument("give either --cluster-peers or --cluster-etcd, not both");
  }
  if (!peers_file.empty() && !etcd.empty()) {
    return InvalidArgument("give either --cluster-peers-file or --cluster-etcd, not both");
  }
  if (!peers_file.empty() && !peers.empty()) {
    return InvalidArgument("give either --cluster-peers or --cluster-peers-file, not both");
  }
  if (!peers.empty()) RETURN_IF_ERROR(cluster::ParsePeerList(peers, 1).status());
  if (replicas < 1 || replicas > 8) {
    return InvalidArgument("--cluster-replicas " + std::to_string(replicas) + ": must be 1..8");
  }
  if (secret_file.empty() && !insecure) {
    return InvalidArgument(
        "a cluster needs --cluster-secret-file FILE (shared by every node), or --cluster-insecure "
        "to run without peer authentication");
  }
  if (peer_timeout.count() <= 0 || connect_timeout.count() <= 0) {
    return InvalidArgument("--cluster-peer-timeout: must be > 0");
  }
  return Status::Ok();
}

ClusterNode::ClusterNode(const ClusterOptions& options, ClusterDataset dataset)
    : options_(options),
      dataset_(std::move(dataset)),
      self_id_(options.advertise.empty() ? options.listen : options.advertise),
      self_address_(self_id_) {}

Result<std::unique_ptr<ClusterNode>> ClusterNode::Start(const ClusterOptions& options,
                                                        ClusterDataset dataset) {
  RETURN_IF_ERROR(options.Validate());
  CacheEngine* engine = dataset.engine;
  std::unique_ptr<ClusterNode> node(new ClusterNode(options, std::move(dataset)));
  if (Status s = node->StartAll(); !s.ok()) {
    node->Stop();  // the peer server is gone: nothing calls the engine from it
    engine->SetCluster(nullptr);
    return s;
  }
  return node;
}

Status ClusterNode::StartAll() {
  // Before the peer server: a peer's request may arrive at once. Until the
  // membership is known this node owns everything and asks no peer.
  engine().SetCluster(std::shared_ptr<ClusterSource>(this, [](ClusterSource*) {}));
  if (!options_.secret_file.empty()) {
    ASSIGN_OR_RETURN(secret_, net::ReadSecretFile(options_.secret_file));
  }
  // With etcd the id lives on the disk, so the node keeps its share at any
  // address; a static list names its members by address.
  if (!options_.etcd.empty()) {
    ASSIGN_OR_RETURN(self_id_, cluster::LoadOrCreateNodeId(dataset_.dir));
  }
  history_ = std::make_unique<cluster::PlacementHistory>(self_id_, options_.replicas);
  handover_thread_ = std::thread([this] { HandoverLoop(); });
  // A client-only member owns nothing, so no peer ever asks it for a block:
  // it opens no port (a pod need not expose one). Its listen/advertise
  // address only names it.
  if (!options_.client_only) {
    ASSIGN_OR_RETURN(server_, net::PeerServer::Start(
                                  net::PeerServerOptions{
                                      .listen = options_.listen,
                                      .secret = secret_,
                                      .dataset = dataset_.id,
                                      .node_id = self_id_,
                                      // A request that misses waits on the
                                      // origin: as many as the origin slots.
                                      .worker_threads = std::max(16, dataset_.origin_concurrency)},
                                  this));
  }
  const Member self{.node_id = self_id_,
                    .address = self_address_,
                    .capacity = options_.client_only ? 0 : StoreCapacity(*dataset_.store),
                    .started_unix_ms = NowUnixMs()};
  if (!options_.etcd.empty()) {
    membership_ = std::make_unique<cluster::EtcdMembership>(cluster::EtcdMembershipOptions{
        .endpoints = SplitList(options_.etcd, ','),
        .cluster = options_.name.empty() ? dataset_.id : options_.name,
        .dataset = dataset_.id,
        .self = self,
        .ttl = options_.etcd_ttl});
  } else {
    // Static peers: equal weights (every node's capacity is its own business;
    // the list says nothing of it).
    std::string list = options_.peers;
    if (!options_.peers_file.empty()) {
      ASSIGN_OR_RETURN(list, cluster::ReadPeerListFile(options_.peers_file));
    }
    ASSIGN_OR_RETURN(std::vector<Member> peers, StaticPeers(list));
    Member me = self;
    me.capacity = options_.client_only ? 0 : 1;
    auto members = std::make_unique<cluster::StaticMembership>(std::move(peers), me);
    static_membership_ = members.get();
    membership_ = std::move(members);
  }
  membership_->OnChange(
      [this](const std::shared_ptr<const Placement>& next) { OnMembership(next); });
  RETURN_IF_ERROR(membership_->Start());
  // A static list publishes no change: its one view is the first.
  if (!placement_.load()) OnMembership(membership_->placement());
  GLOG_INFO("cluster: node {} at {} {} ({}; {} members, {} replica{})", self_id_, self_address_,
            server_ ? "serving peers on " + server_->address()
                    : std::string("client-only: owns nothing, no peer port"),
            membership_->Describe(), placement()->members().size(), options_.replicas,
            options_.replicas == 1 ? "" : "s");
  return Status::Ok();
}

Result<std::vector<Member>> ClusterNode::StaticPeers(std::string_view list) const {
  ASSIGN_OR_RETURN(std::vector<Member> peers, cluster::ParsePeerList(list, 1));
  if (options_.client_only) {
    for (const Member& m : peers) {
      if (m.node_id == self_id_) {
        return InvalidArgument("--cluster-client-only: this node (" + self_id_ +
                               ") is listed in --cluster-peers, which makes it an owner; list "
                               "only the members that cache data");
      }
    }
  }
  return peers;
}

Result<bool> ClusterNode::SetPeers(std::string_view list) {
  if (static_membership_ == nullptr) {
    return InvalidArgument("the member list comes from etcd, not from --cluster-peers");
  }
  if (leaving_.load() || stopped_.load()) return Unavailable("this node is leaving the cluster");
  ASSIGN_OR_RETURN(std::vector<Member> peers, StaticPeers(list));
  ASSIGN_OR_RETURN(bool changed, static_membership_->Update(std::move(peers)));
  if (changed) GLOG_INFO("cluster: new member list: {}", std::string(list));
  return changed;
}

Result<bool> ClusterNode::ReloadPeersFile() {
  if (options_.peers_file.empty()) return InvalidArgument("no --cluster-peers-file to read again");
  ASSIGN_OR_RETURN(std::string list, cluster::ReadPeerListFile(options_.peers_file));
  return SetPeers(list);
}

void ClusterNode::OnMembership(const std::shared_ptr<const Placement>& next) {
  // Callbacks run one at a time: load, record, then publish, so that a
  // status showing the new set also shows the handover it started.
  std::shared_ptr<const Placement> prev = placement_.load();
  const std::shared_ptr<const Placement> old = prev;
  GLOG_INFO("cluster: membership changed: {} -> {} members", prev ? prev->members().size() : 0,
            next->members().size());
  if (next->Find(self_id_) != nullptr) last_with_self_.store(next);
  // The first view: before this node was there, the others owned its share
  // (a node joining, or one back after a while: with etcd it registered
  // just now; a static list may have named it on the others first, and they
  // then served its share as its next candidates). A static list also
  // names members that are not up yet: only those answering now are asked
  // (asking one that is down would mark it down in the peer health, and
  // reads would skip it for a while once it is up).
  if (!prev) {
    std::vector<Member> others;
    for (const Member& m : next->members()) {
      if (m.node_id != self_id_) others.push_back(m);
    }
    if (static_membership_ != nullptr) others = Answering(others);
    prev = std::make_shared<const Placement>(std::move(others));
  }
  const uint64_t generation = history_->Record(prev, *next);
  placement_.store(next);
  if (old) {
    for (const Member& m : old->members()) {
      if (next->Find(m.node_id) == nullptr) health_.Forget(m.node_id);
    }
  }
  {
    MutexLock lock(handover_mu_);
    handover_wanted_ = generation;
  }
  handover_cv_.NotifyAll();
  // The store's owned-object counters follow the new placement. Not under
  // clients_mu_: the recount calls Owns() for every complete object.
  dataset_.store->RecountOwnership();
  MutexLock lock(clients_mu_);
  for (auto it = clients_.begin(); it != clients_.end();) {
    bool live = false;
    for (const Member& m : next->members()) live = live || m.address == it->first;
    if (live) {
      ++it;
    } else {
      retired_.push_back(std::move(it->second));
      it = clients_.erase(it);
    }
  }
}

void ClusterNode::Stop() {
  if (stopped_.exchange(true)) return;
  StopHandover();
  if (membership_) membership_->Stop();
  server_.reset();
}

ClusterNode::~ClusterNode() { Stop(); }

std::string ClusterNode::listen_address() const { return server_ ? server_->address() : ""; }

std::vector<const Member*> ClusterNode::Candidates(const Placement& p, const ObjectKey& key,
                                                   uint64_t block, size_t n) const {
  const std::string pk =
      cluster::PlacementKey(key.dataset, key.key, key.size, block, engine().block_size());
  return p.Rank(pk, n);
}

bool ClusterNode::Owns(const ObjectKey& key, uint64_t block) const {
  std::shared_ptr<const Placement> p = placement_.load();
  if (!p) return true;
  if (options_.replicas == 1) {
    // Per miss and per file of a status call: no vector, one placement key.
    const Member* owner = p->Owner(
        cluster::PlacementKey(key.dataset, key.key, key.size, block, engine().block_size()));
    return owner ? owner->node_id == self_id_ : true;
  }
  for (const Member* m : Candidates(*p, key, block, options_.replicas)) {
    if (m->node_id == self_id_) return true;
  }
  // A placement without any member of capacity (all clients): nobody owns it
  // but the node reading it.
  return p->total_capacity() == 0;
}

bool ClusterNode::IsPrimary(const ObjectKey& key, uint64_t block) const {
  std::shared_ptr<const Placement> p = placement_.load();
  if (!p) return true;
  const Member* owner =
      p->Owner(cluster::PlacementKey(key.dataset, key.key, key.size, block, engine().block_size()));
  // No member of capacity (all clients): as Owns, the node reading it.
  return owner ? owner->node_id == self_id_ : true;
}

std::shared_ptr<net::PeerClient> ClusterNode::ClientFor(const Member& m) {
  MutexLock lock(clients_mu_);
  auto& client = clients_[m.address];
  if (!client) {
    client = std::make_shared<net::PeerClient>(
        m.address, net::PeerClientOptions{.secret = secret_,
                                          .dataset = dataset_.id,
                                          .node_id = self_id_,
                                          .connect_timeout = options_.connect_timeout,
                                          .request_timeout = options_.peer_timeout});
  }
  return client;
}

net::BlockRequest ClusterNode::RequestOf(const ObjectKey& key, uint64_t block) const {
  const uint64_t bs = engine().block_size();
  const uint64_t offset = block * bs;
  return net::BlockRequest{.dataset = key.dataset,
                           .key = key.key,
                           .etag = key.etag,
                           .size = key.size,
                           .block = block,
                           .offset = offset,
                           .length = std::min(bs, key.size - std::min(key.size, offset))};
}

Result<BlockData> ClusterNode::ReadFromOwner(const BlockRef& ref, Priority priority,
                                             bool* next_in_line) {
  std::shared_ptr<const Placement> p = placement_.load();
  if (!p || stopped_.load()) return NotFound("no cluster");
  // The owners, then one more member: it takes over a dead owner's share.
  const size_t n = static_cast<size_t>(options_.replicas) + 1;
  const net::BlockRequest req = RequestOf(ref.key, ref.block);
  Status last = NotFound("no live owner");
  for (const Member* m : Candidates(*p, ref.key, ref.block, n)) {
    if (m->node_id == self_id_) {  // next in line: this node reads the origin and keeps it
      *next_in_line = true;
      break;
    }
    if (!health_.Usable(m->node_id)) continue;
    auto got = ClientFor(*m)->GetBlock(req);
    if (got.ok() && (*got)->size() == ref.length) {
      health_.RecordSuccess(m->node_id);
      return std::move(*got);
    }
    last = got.ok() ? Corruption("peer " + m->address + " sent " + std::to_string((*got)->size()) +
                                 " bytes, expected " + std::to_string(ref.length))
                    : got.status();
    // A peer that answered (an error of its own, e.g. its origin failed) is
    // alive; one that could not be reached, timed out or sent garbage is not.
    const Code c = last.code();
    if (c == Code::kUnavailable || c == Code::kCorruption || c == Code::kPermissionDenied ||
        c == Code::kIoError) {
      health_.RecordFailure(m->node_id);
    }
    GLOG_DEBUG("cluster: {} block {} from {}: {}", ref.key.key, ref.block, m->address,
               last.ToString());
  }
  return NotFound(last.message());
}

Result<bool> ClusterNode::WarmRemote(const ObjectKey& key) {
  std::shared_ptr<const Placement> p = placement_.load();
  if (!p || stopped_.load()) return NotFound("no cluster");
  const net::BlockRequest req = RequestOf(key, 0);
  for (const Member* m : Candidates(*p, key, 0, static_cast<size_t>(options_.replicas) + 1)) {
    if (m->node_id == self_id_) break;
    if (!health_.Usable(m->node_id)) continue;
    auto warmed = ClientFor(*m)->Warm(req);
    if (warmed.ok()) {
      health_.RecordSuccess(m->node_id);
      return *warmed;
    }
    if (warmed.status().code() == Code::kUnavailable) health_.RecordFailure(m->node_id);
  }
  return NotFound("no live owner of " + key.key);
}

Result<net::BlockPayload> ClusterNode::GetBlock(const net::BlockRequest& r) {
  const ObjectKey key{.dataset = r.dataset, .key = r.key, .etag = r.etag, .size = r.size};
  ASSIGN_OR_RETURN(ServedBlock b, engine().ServePeer(key, r.block));
  if (b.fd >= 0) {
    return net::BlockPayload{
        .fd = b.fd, .file_offset = b.file_offset, .length = b.length, .checksum = b.checksum};
  }
  return net::BlockPayload{.bytes = b.bytes, .length = b.length};
}

Result<bool> ClusterNode::Warm(const net::BlockRequest& r) {
  const ObjectKey key{.dataset = r.dataset, .key = r.key, .etag = r.etag, .size = r.size};
  return engine().WarmForPeer(key);
}

void ClusterNode::SetStatusProvider(std::function<Result<nlohmann::json>()> provider) {
  MutexLock lock(provider_mu_);
  status_provider_ = std::move(provider);
}

Result<std::string> ClusterNode::StatusJson() {
  std::function<Result<nlohmann::json>()> provider;
  {
    MutexLock lock(provider_mu_);
    provider = status_provider_;
  }
  if (!provider) return Unavailable("node " + self_id_ + " is starting");
  ASSIGN_OR_RETURN(nlohmann::json j, provider());
  // Its member set and handover: what a draining node waits on, and the
  // handover's progress in `granary status --cluster`.
  j["cluster"] = ToJson(stats());
  return j.dump();
}

nlohmann::json ClusterNode::MemberStatuses() {
  std::shared_ptr<const Placement> p = placement_.load();
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::future<nlohmann::json>> pending;
  for (const Member& m : p ? p->members() : std::vector<Member>{}) {
    pending.push_back(std::async(std::launch::async, [this, m]() -> nlohmann::json {
      nlohmann::json row = {{"node", m.node_id},
                            {"address", m.address},
                            {"capacity", m.capacity},
                            {"self", m.node_id == self_id_}};
      Result<std::string> text = m.node_id == self_id_ ? StatusJson() : ClientFor(m)->StatusJson();
      if (!text.ok()) {
        row["state"] = "down";
        row["error"] = text.status().ToString();
        return row;
      }
      auto parsed = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        row["state"] = "down";
        row["error"] = "peer sent a status that is not JSON";
        return row;
      }
      row["state"] = "up";
      row["status"] = std::move(parsed);
      return row;
    }));
  }
  for (auto& f : pending) rows.push_back(f.get());
  return {{"self", self_id_}, {"members", std::move(rows)}};
}

ClusterStats ClusterNode::stats() const {
  ClusterStats s{.self = self_id_,
                 .address = self_address_,
                 .membership = membership_ ? membership_->Describe() : ""};
  if (std::shared_ptr<const Placement> p = placement_.load()) {
    s.members = p->members().size();
    s.placement_generation = p->generation();
    for (const Member& m : p->members()) s.member_ids.push_back(m.node_id);
  }
  s.leaving = leaving_.load();
  {
    MutexLock lock(drain_mu_);
    s.drain = drain_;
    if (drain_.state == "draining") {
      s.drain.elapsed_s =
          std::chrono::duration<double>(Clock::Real()->Now() - drain_started_).count();
    }
  }
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.handover = HandoverStats{.previous_sets = history_ ? history_->kept() : 0,
                             .objects_total = ld(handover_.objects_total),
                             .objects_checked = ld(handover_.objects_checked),
                             .passes = ld(handover_.passes),
                             .blocks = ld(handover_.blocks),
                             .bytes = ld(handover_.bytes)};
  s.peer_latency_buckets.assign(net::kPeerLatencyBuckets, 0);
  for (size_t k = 0; k < net::kPeerErrorKinds; ++k) {
    s.peer_errors[net::PeerErrorKindName(static_cast<net::PeerErrorKind>(k))] = 0;
  }
  auto add = [&s](const net::PeerClient& c) {
    const net::PeerClientStats cs = c.stats();
    for (size_t k = 0; k < net::kPeerErrorKinds; ++k) {
      s.peer_errors[net::PeerErrorKindName(static_cast<net::PeerErrorKind>(k))] += cs.errors[k];
    }
    for (size_t i = 0; i < net::kPeerLatencyBuckets; ++i) {
      s.peer_latency_buckets[i] += cs.latency_buckets[i];
    }
    s.peer_latency_sum_s += cs.latency_sum_s;
  };
  {
    MutexLock lock(clients_mu_);
    for (const auto& [addr, c] : clients_) add(*c);
    for (const auto& c : retired_) add(*c);
  }
  if (server_) s.server = server_->stats();
  return s;
}

}  // namespace granary
