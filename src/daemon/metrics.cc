// RenderMetrics and MetricsServer (see metrics.h).
#include "daemon/metrics.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace granary {
namespace {

std::string EscapeLabel(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// Builds the exposition text; every sample carries the dataset label.
class Writer {
 public:
  explicit Writer(std::string_view dataset) : ds_("dataset=\"" + EscapeLabel(dataset) + "\"") {}

  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP " + std::string(name) + " " + std::string(help) + "\n";
    out_ += "# TYPE " + std::string(name) + " " + std::string(type) + "\n";
  }
  // labels: extra `k="v"` pairs, comma-separated, already escaped.
  void Sample(std::string_view name, double value, std::string_view labels = "") {
    out_ += std::string(name) + "{" + ds_ + (labels.empty() ? "" : ",") + std::string(labels) +
            "} " + Num(value) + "\n";
  }
  void One(std::string_view name, std::string_view type, std::string_view help, double value) {
    Family(name, type, help);
    Sample(name, value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string ds_;
  std::string out_;
};

// A histogram from per-bucket counts (not cumulative; one more than `bounds`: +Inf).
template <typename Bounds, typename Buckets>
void Histogram(Writer& w, const std::string& name, std::string_view help, const Bounds& bounds,
               const Buckets& buckets, double sum) {
  w.Family(name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < std::size(buckets); ++i) {
    cum += buckets[i];
    std::string le = i < std::size(bounds) ? Num(bounds[i]) : "+Inf";
    w.Sample(name + "_bucket", cum, "le=\"" + le + "\"");
  }
  w.Sample(name + "_sum", sum);
  w.Sample(name + "_count", cum);
}

void RenderEngine(Writer& w, const EngineStats& e) {
  w.One("granary_dataset_files", "gauge", "Files in the dataset snapshot.", e.ufs_files);
  w.One("granary_dataset_bytes", "gauge", "Bytes in the dataset snapshot.", e.ufs_bytes);
  w.Family("granary_reads_total", "counter", "Userspace reads served by the engine, by source.");
  w.Sample("granary_reads_total", e.hit_reads, "source=\"cache\"");
  w.Sample("granary_reads_total", e.miss_reads, "source=\"origin\"");
  w.Family("granary_read_bytes_total", "counter", "Bytes of userspace reads, by source.");
  w.Sample("granary_read_bytes_total", e.hit_bytes, "source=\"cache\"");
  w.Sample("granary_read_bytes_total", e.miss_bytes, "source=\"origin\"");
  w.One("granary_read_errors_total", "counter", "Userspace reads that failed.", e.read_errors);
  w.One("granary_origin_requests_total", "counter", "Block GETs sent to the origin.",
        e.origin_requests);
  w.One("granary_origin_bytes_total", "counter", "Bytes received from the origin.", e.origin_bytes);
  w.Family("granary_origin_errors_total", "counter",
           "Origin GETs that failed after retries, by kind.");
  for (size_t i = 1; i < kStatusCodes; ++i) {
    w.Sample("granary_origin_errors_total", e.origin_errors_by_code[i],
             "kind=\"" + std::string(CodeName(static_cast<Code>(i))) + "\"");
  }
  Histogram(w, "granary_origin_request_duration_seconds",
            "Latency of origin GETs (the connector call, retries included).", kOriginLatencyBounds,
            e.origin_latency_buckets, e.origin_latency_sum_s);
  w.One("granary_flight_joins_total", "counter", "Reads that waited on another reader's fetch.",
        e.flight_joins);
  w.One("granary_admission_waits_total", "counter",
        "Fetches that waited for room in the admission queue (cache disk behind).",
        e.admission_waits);
  w.One("granary_admission_queue_bytes", "gauge", "Fetched bytes waiting to be admitted now.",
        e.admission_pending_bytes);
  w.Family("granary_readahead_blocks_total", "counter",
           "Readahead blocks started, or not started because readahead memory was spent.");
  w.Sample("granary_readahead_blocks_total", e.readahead_started, "result=\"started\"");
  w.Sample("granary_readahead_blocks_total", e.readahead_dropped, "result=\"dropped\"");
  w.One("granary_readahead_bytes", "gauge", "Bytes of readahead fetches in flight now.",
        e.readahead_pending_bytes);
}

void RenderStore(Writer& w, const StoreStats& s) {
  w.One("granary_cache_admissions_total", "counter", "Objects and blocks admitted to the cache.",
        s.admissions);
  w.Family("granary_cache_refusals_total", "counter", "Admissions refused, by reason.");
  w.Sample("granary_cache_refusals_total", s.refusals, "reason=\"policy\"");
  w.Sample("granary_cache_refusals_total", s.no_space, "reason=\"no_space\"");
  w.One("granary_cache_evictions_total", "counter", "Objects deleted by eviction.", s.evictions);
  w.One("granary_cache_demotions_total", "counter", "Objects moved to a slower tier.", s.demotions);
  w.One("granary_cache_checksum_failures_total", "counter",
        "Cached objects dropped because checksum verification failed.", s.checksum_failures);
  w.Family("granary_cache_used_bytes", "gauge", "Bytes allocated in each cache tier.");
  for (size_t i = 0; i < s.tiers.size(); ++i) {
    w.Sample("granary_cache_used_bytes", s.tiers[i].used_bytes,
             "tier=\"" + std::to_string(i) + "\",medium=\"" +
                 std::string(MediumName(s.tiers[i].medium)) + "\"");
  }
  w.Family("granary_cache_quota_bytes", "gauge", "Quota of each cache tier.");
  for (size_t i = 0; i < s.tiers.size(); ++i) {
    w.Sample("granary_cache_quota_bytes", s.tiers[i].quota,
             "tier=\"" + std::to_string(i) + "\",medium=\"" +
                 std::string(MediumName(s.tiers[i].medium)) + "\"");
  }
  w.Family("granary_cache_files", "gauge", "Cache files in each tier (complete or partial).");
  for (size_t i = 0; i < s.tiers.size(); ++i) {
    w.Sample("granary_cache_files", s.tiers[i].files,
             "tier=\"" + std::to_string(i) + "\",medium=\"" +
                 std::string(MediumName(s.tiers[i].medium)) + "\"");
  }
}

void RenderFuse(Writer& w, const FuseStats& f) {
  w.One("granary_fuse_requests_total", "counter", "FUSE requests read from the kernel.",
        f.requests);
  w.One("granary_fuse_requests_resent_total", "counter",
        "FUSE requests the kernel resent because a previous daemon had read them and died.",
        f.requests_resent);
  w.One("granary_fuse_errors_total", "counter", "FUSE replies with an error.", f.errors);
  w.Family("granary_opens_total", "counter", "File opens, by how reads are served.");
  w.Sample("granary_opens_total", f.passthrough_opens, "mode=\"passthrough\"");
  w.Sample("granary_opens_total", f.userspace_opens, "mode=\"userspace\"");
  w.One("granary_fuse_userspace_reads_total", "counter", "READ requests answered by the daemon.",
        f.userspace_reads);
  w.One("granary_fuse_userspace_read_bytes_total", "counter", "Bytes in READ replies.",
        f.userspace_read_bytes);
  w.One("granary_fuse_dirs_prefetched_total", "counter",
        "Directories listed ahead after files in them were opened by name.", f.dirs_prefetched);
  w.One("granary_fuse_stores_total", "counter",
        "Fetched ranges put into the mount's page cache ahead of their reader (FUSE_NOTIFY_STORE).",
        f.stores);
  w.One("granary_fuse_store_bytes_total", "counter", "Bytes in those ranges.", f.store_bytes);
  if (f.files_read_counted) {
    w.Family("granary_files_read_total", "counter",
             "Files readers closed after reading (kernel close events; page-cache reads "
             "included), by where their bytes came from.");
    w.Sample("granary_files_read_total", f.files_read - std::min(f.files_read, f.files_read_missed),
             "source=\"cache\"");
    w.Sample("granary_files_read_total", std::min(f.files_read, f.files_read_missed),
             "source=\"beyond_cache\"");
  }
}

void RenderLoad(Writer& w, const LoadProgress& p) {
  w.One("granary_load_running", "gauge", "1 while a load runs.", p.running ? 1 : 0);
  w.One("granary_load_files", "gauge", "Files targeted by the current or last load.",
        p.files_total);
  w.One("granary_load_files_done", "gauge", "Files the current or last load has handled.",
        p.files_done);
  w.One("granary_load_bytes", "gauge", "Bytes targeted by the current or last load.",
        p.bytes_total);
  w.One("granary_load_bytes_done", "gauge", "Bytes the current or last load has handled.",
        p.bytes_done);
}

void RenderWrites(Writer& w, const OverlayStats& o) {
  w.One("granary_write_pending_files", "gauge",
        "Files written through the mount and not yet uploaded.", o.pending_files);
  w.One("granary_write_pending_bytes", "gauge", "Bytes of those files.", o.pending_bytes);
  w.One("granary_write_unclosed_files", "gauge",
        "Pending files last changed without a close or fsync (not uploaded on their own).",
        o.unclosed_files);
  w.One("granary_write_staged_bytes", "gauge", "Bytes in the staging area (pending and uploaded).",
        o.staged_bytes);
  w.One("granary_write_uploads_total", "counter", "Files uploaded to the origin.", o.uploads);
  w.One("granary_write_upload_failures_total", "counter",
        "Uploads that failed (the data stays staged and is retried).", o.upload_failures);
  w.One("granary_write_uploaded_bytes_total", "counter", "Bytes uploaded to the origin.",
        o.uploaded_bytes);
  w.One("granary_write_upload_seconds_total", "counter",
        "Time spent uploading (bytes / seconds = upload throughput).", o.upload_seconds);
  w.One("granary_write_deletes_total", "counter", "Origin objects deleted through the mount.",
        o.deletes);
}

void RenderCluster(Writer& w, const EngineStats& e, const StoreStats& s, const ClusterStats& c) {
  w.One("granary_cluster_members", "gauge",
        "Live members of the dataset's cluster, this node included.", c.members);
  w.One("granary_cluster_remote_hits_total", "counter", "Blocks read from their owner peers.",
        e.peer_blocks);
  w.One("granary_cluster_views_total", "counter",
        "Member sets this node has seen (each change of a member, its address or its capacity "
        "is one more).",
        c.placement_generation);
  w.One("granary_cluster_handover_previous_sets", "gauge",
        "Earlier member sets this node still takes its share over from (0: no handover in "
        "progress).",
        c.handover.previous_sets);
  w.One("granary_cluster_handover_blocks_total", "counter",
        "Blocks this node received from their owners before a membership change.",
        c.handover.blocks);
  w.One("granary_cluster_handover_bytes_total", "counter",
        "Bytes this node received from their owners before a membership change.", c.handover.bytes);
  w.One("granary_cluster_remote_bytes_total", "counter", "Bytes read from owner peers.",
        e.peer_bytes);
  w.One("granary_cluster_fallbacks_total", "counter",
        "Blocks no peer could supply, read from the origin instead.", e.peer_fallbacks);
  w.One("granary_cluster_near_admitted_total", "counter",
        "Blocks other nodes own kept here as near copies.", e.near_admitted);
  w.One("granary_cluster_near_refused_total", "counter",
        "Near copies not kept: they would have needed eviction.", s.near_refused);
  w.One("granary_cluster_near_evictions_total", "counter",
        "Evicted objects this node does not own (taken before owned ones).", s.near_evictions);
  w.Family("granary_cluster_peer_errors_total", "counter", "Failed peer requests, by kind.");
  for (const auto& [kind, n] : c.peer_errors) {
    w.Sample("granary_cluster_peer_errors_total", n, "kind=\"" + EscapeLabel(kind) + "\"");
  }
  Histogram(w, "granary_cluster_peer_request_duration_seconds",
            "Latency of requests to peers (blocks, warm-ups, status).", net::kPeerLatencyBounds,
            c.peer_latency_buckets, c.peer_latency_sum_s);
  w.One("granary_cluster_served_blocks_total", "counter", "Blocks served to peers.",
        e.served_blocks);
  w.One("granary_cluster_served_hits_total", "counter",
        "Blocks served to peers straight from this node's cache (no origin fetch).", e.served_hits);
  w.One("granary_cluster_served_bytes_total", "counter", "Bytes served to peers.", e.served_bytes);
  w.One("granary_cluster_served_errors_total", "counter", "Peer requests that failed here.",
        e.served_errors);
  w.One("granary_cluster_auth_failures_total", "counter",
        "Peer connections refused at the handshake (secret, mode, dataset).",
        c.server.auth_failures);
  w.One("granary_cluster_protocol_errors_total", "counter",
        "Peer connections dropped for malformed frames.", c.server.protocol_errors);
}

void RenderApi(Writer& w, const ApiService::Counters& a) {
  w.One("granary_api_opens_total", "counter",
        "Files the daemon opened for attached clients (Client::Attach), fetching them first "
        "when not cached.",
        a.opens);
  w.One("granary_api_direct_reads_total", "counter",
        "Reads attached clients made of cache files they opened themselves, without asking "
        "the daemon (reported in batches).",
        a.direct_reads);
}

}  // namespace

std::string RenderMetrics(const MetricsInput& in) {
  Writer w(in.dataset);
  RenderEngine(w, in.engine);
  RenderStore(w, in.store);
  if (in.fuse) RenderFuse(w, *in.fuse);
  RenderLoad(w, in.load.value_or(LoadProgress{}));
  if (in.cluster) RenderCluster(w, in.engine, in.store, *in.cluster);
  if (in.writes) RenderWrites(w, *in.writes);
  if (in.api) RenderApi(w, *in.api);
  return w.Take();
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& addr,
                                                            std::function<std::string()> render) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 == addr.size()) {
    return InvalidArgument("metrics address '" + addr + "': expected HOST:PORT");
  }
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "127.0.0.1";  // ":9100": loopback unless a host is named
  std::string port_text = addr.substr(colon + 1);
  addrinfo hints{
      .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    return InvalidArgument("metrics address '" + addr + "': " + ::gai_strerror(rc));
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
    int err = errno;
    ::freeaddrinfo(res);
    if (fd >= 0) ::close(fd);
    return IoError("metrics address '" + addr + "': " + std::strerror(err));
  }
  ::freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::string address =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  auto s =
      std::unique_ptr<MetricsServer>(new MetricsServer(fd, wake, address, port, std::move(render)));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  GLOG_INFO("metrics: serving http://{}/metrics", address);
  return s;
}

MetricsServer::MetricsServer(int fd, int wake_fd, std::string address, int port,
                             std::function<std::string()> render)
    : fd_(fd),
      wake_fd_(wake_fd),
      address_(std::move(address)),
      port_(port),
      render_(std::move(render)) {}

MetricsServer::~MetricsServer() {
  uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof(one)) < 0) GLOG_WARN("metrics: wake failed");
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
  ::close(wake_fd_);
}

void MetricsServer::Loop() {
  for (;;) {
    pollfd fds[2] = {{.fd = fd_, .events = POLLIN}, {.fd = wake_fd_, .events = POLLIN}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    ServeOne(c);
    ::close(c);
  }
}

void MetricsServer::ServeOne(int fd) {
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  bool head = req.starts_with("HEAD ");
  if (!req.starts_with("GET ") && !head) {
    status = "405 Method Not Allowed";
    body = "only GET /metrics\n";
  } else if (std::string_view path = std::string_view(req).substr(head ? 5 : 4);
             !(path.starts_with("/metrics ") || path.starts_with("/metrics?"))) {
    status = "404 Not Found";
    body = "see /metrics\n";
  } else {
    body = render_();
  }
  std::string resp = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                     "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n";
  if (!head) resp += body;
  for (size_t off = 0; off < resp.size();) {
    ssize_t n = ::send(fd, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace granary
