// EtcdMembership implementation: lease, registration, keepalive and poll
// loops. See etcd_membership.h.
#include "cluster/etcd_membership.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/log.h"

namespace granary::cluster {
namespace {

using std::chrono::milliseconds;

bool ValidName(std::string_view s) { return !s.empty() && s.find('/') == std::string_view::npos; }

int64_t TtlSeconds(milliseconds ttl) { return std::max<int64_t>(1, (ttl.count() + 999) / 1000); }

}  // namespace

std::string EncodeMemberValue(const Member& m) {
  return nlohmann::json{
      {"address", m.address}, {"capacity", m.capacity}, {"started", m.started_unix_ms}}
      .dump();
}

Result<Member> DecodeMemberValue(std::string_view node_id, std::string_view value) {
  auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("address") || !j["address"].is_string()) {
    return InvalidArgument("member '" + std::string(node_id) + "': value is not {\"address\",...}");
  }
  Member m{.node_id = std::string(node_id), .address = j["address"].get<std::string>()};
  if (j.contains("capacity") && j["capacity"].is_number_unsigned()) {
    m.capacity = j["capacity"].get<uint64_t>();
  }
  if (j.contains("started") && j["started"].is_number_integer()) {
    m.started_unix_ms = j["started"].get<int64_t>();
  }
  RETURN_IF_ERROR(ParseHostPort(m.address).status().WithContext("member '" + m.node_id + "'"));
  return m;
}

EtcdMembership::EtcdMembership(EtcdMembershipOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      placement_(std::make_shared<const Placement>(std::vector<Member>{})) {
  if (options_.self.node_id.empty()) options_.self.node_id = options_.self.address;
  if (options_.self.started_unix_ms == 0) {
    options_.self.started_unix_ms = clock_->WallNanos() / 1'000'000;
  }
  if (options_.poll_interval.count() <= 0) {
    options_.poll_interval = std::max(milliseconds(50), options_.ttl / 6);
  }
}

EtcdMembership::~EtcdMembership() { Stop(); }

std::string EtcdMembership::MemberPrefix() const {
  return options_.key_prefix + "/" + options_.cluster + "/" + options_.dataset + "/members/";
}

std::string EtcdMembership::member_key() const { return MemberPrefix() + options_.self.node_id; }

Status EtcdMembership::Validate() const {
  if (!ValidName(options_.cluster)) {
    return InvalidArgument("etcd membership: cluster name '" + options_.cluster +
                           "' must be non-empty without '/'");
  }
  if (!ValidName(options_.dataset)) {
    return InvalidArgument("etcd membership: dataset id '" + options_.dataset +
                           "' must be non-empty without '/'");
  }
  if (!ValidName(options_.self.node_id)) {
    return InvalidArgument("etcd membership: node id '" + options_.self.node_id +
                           "' must be non-empty without '/'");
  }
  RETURN_IF_ERROR(
      ParseHostPort(options_.self.address).status().WithContext("etcd membership: self"));
  if (options_.ttl < milliseconds(1000)) {
    return InvalidArgument("etcd membership: ttl must be >= 1 s (etcd leases count whole seconds)");
  }
  return Status::Ok();
}

Status EtcdMembership::Start() {
  {
    MutexLock lock(mu_);
    if (started_) return InvalidArgument("etcd membership: Start called twice");
    started_ = true;
  }
  RETURN_IF_ERROR(Validate());
  ASSIGN_OR_RETURN(client_, EtcdClient::Create(options_.endpoints, options_.request_timeout));
  RETURN_IF_ERROR(Register());
  if (Status s = Refresh(); !s.ok()) {
    client_->Revoke(lease_.exchange(0)).IgnoreError();  // best effort: leave no half-joined member
    return s;
  }
  GLOG_INFO("cluster: joined {} as {} ({} members)", Describe(), options_.self.node_id,
            placement()->members().size());
  keepalive_thread_ = std::thread([this] { KeepAliveLoop(); });
  poll_thread_ = std::thread([this] { PollLoop(); });
  return Status::Ok();
}

Status EtcdMembership::Register() {
  if (lease_.load() == 0) {
    ASSIGN_OR_RETURN(int64_t lease, client_->Grant(TtlSeconds(options_.ttl)));
    lease_.store(lease);
  }
  need_put_.store(true);
  Status put = client_->Put(member_key(), EncodeMemberValue(options_.self), lease_.load());
  if (put.code() == Code::kNotFound) lease_.store(0);  // the lease expired meanwhile: grant anew
  RETURN_IF_ERROR(put);
  need_put_.store(false);
  return Status::Ok();
}

Status EtcdMembership::Refresh() {
  const std::string prefix = MemberPrefix();
  ASSIGN_OR_RETURN(EtcdRange range, client_->RangePrefix(prefix));
  std::vector<Member> members;
  members.reserve(range.kvs.size());
  bool self_seen = false;
  for (const EtcdKeyValue& kv : range.kvs) {
    std::string_view node_id = std::string_view(kv.key).substr(prefix.size());
    auto m = DecodeMemberValue(node_id, kv.value);
    if (!m.ok()) {
      GLOG_WARN("cluster: ignoring etcd key {}: {}", kv.key, m.status().message());
      continue;
    }
    self_seen = self_seen || m->node_id == options_.self.node_id;
    members.push_back(std::move(*m));
  }
  // Our key vanished while our lease lives (deleted by hand?): put it again.
  if (!self_seen && lease_.load() != 0) need_put_.store(true);
  Publish(std::move(members));
  return Status::Ok();
}

void EtcdMembership::Publish(std::vector<Member> members) {
  std::shared_ptr<const Placement> next;
  {
    MutexLock lock(mu_);
    auto candidate =
        std::make_shared<const Placement>(std::move(members), placement_->generation() + 1);
    if (candidate->members() == placement_->members()) return;
    GLOG_INFO("cluster: {} members (was {}), generation {}", candidate->members().size(),
              placement_->members().size(), candidate->generation());
    placement_ = candidate;
    next = std::move(candidate);
  }
  std::vector<std::function<void(std::shared_ptr<const Placement>)>> callbacks;
  {
    MutexLock lock(callbacks_mu_);
    callbacks = callbacks_;
  }
  for (auto& cb : callbacks) cb(next);
}

bool EtcdMembership::WaitFor(Clock::Duration d) {
  MutexLock lock(mu_);
  wake_.WaitFor(lock, d, [this]() REQUIRES(mu_) { return stopping_; });
  return !stopping_;
}

void EtcdMembership::KeepAliveLoop() {
  const Clock::Duration interval = options_.ttl / 3;
  bool failing = false;  // in a streak of failed keepalives (log once per streak)
  while (WaitFor(interval)) {
    Status s;
    if (lease_.load() == 0 || need_put_.load()) {
      s = Register();
    } else {
      auto ttl = client_->KeepAlive(lease_.load());
      if (ttl.ok() && *ttl <= 0) {
        GLOG_WARN("cluster: etcd lease {:x} is gone; registering {} again", lease_.load(),
                  options_.self.node_id);
        lease_.store(0);
        s = Register();
      } else {
        s = ttl.status();
      }
    }
    if (!s.ok() && !failing) GLOG_WARN("cluster: keepalive failed: {}", s.message());
    if (s.ok() && failing) GLOG_INFO("cluster: keepalive works again");
    failing = !s.ok();
  }
}

void EtcdMembership::PollLoop() {
  bool failing = false;  // in a streak of failed polls (log once per streak)
  while (WaitFor(options_.poll_interval)) {
    Status s = Refresh();
    if (!s.ok() && !failing)
      GLOG_WARN("cluster: reading members failed (keeping the last view): {}", s.message());
    failing = !s.ok();
  }
}

void EtcdMembership::JoinThreads() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.NotifyAll();
  MutexLock lock(threads_mu_);
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
}

void EtcdMembership::Stop() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  JoinThreads();
  const int64_t lease = lease_.exchange(0);
  if (client_ != nullptr && lease != 0) {
    if (Status s = client_->Revoke(lease); !s.ok()) {
      GLOG_WARN("cluster: leaving: revoking the etcd lease failed (it expires in {} ms): {}",
                options_.ttl.count(), s.message());
    }
  }
}

void EtcdMembership::AbandonForTest() {
  JoinThreads();
  lease_.store(0);
}

std::shared_ptr<const Placement> EtcdMembership::placement() const {
  MutexLock lock(mu_);
  return placement_;
}

void EtcdMembership::OnChange(std::function<void(std::shared_ptr<const Placement>)> cb) {
  MutexLock lock(callbacks_mu_);
  callbacks_.push_back(std::move(cb));
}

std::string EtcdMembership::Describe() const {
  std::string endpoints;
  for (const std::string& e : options_.endpoints) endpoints += (endpoints.empty() ? "" : ",") + e;
  return "etcd " + endpoints + ", cluster " + options_.cluster + ", dataset " + options_.dataset;
}

}  // namespace granary::cluster
