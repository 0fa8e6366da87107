// EtcdMembership: cluster membership through etcd (v3 JSON gateway). Granary
// implements no consensus: etcd is the coordination store.
//
// Layout: each member keeps the key
//   <key_prefix>/<cluster>/<dataset>/members/<node-id>
//     = {"address": "HOST:PORT", "capacity": BYTES, "started": UNIX_MS}
// bound to a lease of `ttl` (rounded up to whole seconds, as etcd counts),
// renewed every ttl/3. A member that stops renewing (crash, partition)
// disappears when its lease expires; Stop() revokes the lease, so a clean exit
// is seen at once.
//
// Watching: a range poll of the members prefix every poll_interval (default
// ttl/6), not a streaming watch: the departure latency is bounded by the TTL
// anyway, a poll needs no long-lived stream to supervise, and after an etcd
// restart it simply resumes. A view is published (OnChange) only when the set
// of members or their fields differ from the last one. While etcd cannot be
// reached the last view is kept.
//
// Recovery: when a keepalive finds the lease gone (etcd restarted with new
// state, a partition longer than the TTL healed, the lease was revoked) the
// member grants a new lease and registers again; when the poll finds this
// member's key missing while its lease lives, it puts the key again.
//
// Threads: Start() runs two internal threads, one for keepalives and one for
// the poll (so a slow poll never delays a keepalive); OnChange callbacks run
// on the poll thread (for the first view, read by Start(), on the thread
// calling Start). Stop() joins both, then revokes.
//
// Thread safety: all public methods are thread-safe. Callbacks must not call
// Stop() (it joins the thread they run on).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace granary::cluster {

struct EtcdMembershipOptions {
  std::vector<std::string> endpoints;               // "http://HOST:PORT", tried in order on failure
  std::string cluster;                              // cluster name (no '/')
  std::string dataset;                              // dataset id (no '/')
  Member self;                                      // this node; node_id "" = its address
  std::chrono::milliseconds ttl{3000};              // lease TTL (>= 1 s; etcd counts whole seconds)
  std::chrono::milliseconds request_timeout{2000};  // per etcd request, connect included
  std::chrono::milliseconds poll_interval{0};       // members poll period; 0 = ttl / 6
  std::string key_prefix = "/granary";              // first component of every key
  Clock* clock = nullptr;                           // nullptr: Clock::Real()
};

class EtcdMembership : public Membership {
 public:
  explicit EtcdMembership(EtcdMembershipOptions options);
  ~EtcdMembership() override;  // Stop()
  EtcdMembership(const EtcdMembership&) = delete;
  EtcdMembership& operator=(const EtcdMembership&) = delete;

  // InvalidArgument for bad options (endpoint syntax, empty cluster, ...);
  // Unavailable "etcd http://h:p: connect failed (...)" when no endpoint
  // answers within request_timeout each.
  Status Start() override;
  void Stop() override;
  std::shared_ptr<const Placement> placement() const override;
  void OnChange(std::function<void(std::shared_ptr<const Placement>)> cb) override;
  std::string Describe() const override;

  // This member's key in etcd.
  std::string member_key() const;
  // The current lease id (0 before Start or after a lost lease); for tests.
  int64_t lease_id() const { return lease_.load(); }
  // Stops the threads WITHOUT revoking the lease, as a crashed process would:
  // the key lives on until the lease expires. For tests; Stop() after it only
  // releases resources.
  void AbandonForTest();

 private:
  Status Validate() const;
  // Grants a lease when there is none, then puts this member's key.
  Status Register();
  // Reads the members prefix and publishes a new view if it differs.
  Status Refresh();
  void Publish(std::vector<Member> members);
  void KeepAliveLoop();
  void PollLoop();
  // Waits `d` or until stopping; false when stopping.
  bool WaitFor(Clock::Duration d);
  void JoinThreads();
  std::string MemberPrefix() const;

  EtcdMembershipOptions options_;
  Clock* const clock_;
  std::unique_ptr<EtcdClient> client_;  // set by Start
  std::atomic<int64_t> lease_{0};       // 0: no lease held
  std::atomic<bool> need_put_{false};   // the key must be put again under lease_

  // Guards placement_, stopping_, started_, stopped_; taken before callbacks_mu_.
  mutable Mutex mu_ ACQUIRED_BEFORE(callbacks_mu_);
  CondVar wake_;  // signalled on stop
  std::shared_ptr<const Placement> placement_ GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;

  Mutex callbacks_mu_;  // guards callbacks_; never held while a callback runs
  std::vector<std::function<void(std::shared_ptr<const Placement>)>> callbacks_
      GUARDED_BY(callbacks_mu_);

  // Guards the joining of the threads (Stop vs AbandonForTest); not annotated
  // on the threads: they are started before any other thread can join them.
  Mutex threads_mu_;
  std::thread keepalive_thread_;
  std::thread poll_thread_;
};

// The JSON value of a member key: {"address","capacity","started"}.
std::string EncodeMemberValue(const Member& m);
// Parses a member key's value; `node_id` comes from the key. InvalidArgument
// when it is not such an object or the address is not HOST:PORT.
Result<Member> DecodeMemberValue(std::string_view node_id, std::string_view value);

}  // namespace granary::cluster
