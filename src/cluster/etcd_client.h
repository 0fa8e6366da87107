// EtcdClient: the few etcd v3 calls membership needs, through etcd's JSON
// gRPC gateway over HTTP (libcurl via CurlClient). Works with etcd 3.4+
// (paths /v3/lease/{grant,keepalive,revoke}, /v3/kv/{put,range}).
//
// Keys and values are base64 in the gateway's JSON and int64 fields are
// decimal strings; this class hides both. Endpoints are tried in order from
// the last one that answered: a transport failure or a 5xx moves on to the
// next, so one dead etcd member does not stop the cluster. Every request is
// bounded by request_timeout (connect included), so no call hangs.
//
// Errors: Unavailable "etcd http://h:p: connect failed (Couldn't connect to
// server)" when no endpoint answers (every endpoint named); Unavailable or
// InvalidArgument with etcd's message for an error reply.
//
// Thread safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "granary/status.h"
#include "ufs/curl_client.h"

namespace granary::cluster {

struct EtcdKeyValue {
  std::string key;           // decoded
  std::string value;         // decoded
  int64_t lease = 0;         // lease the key is bound to (0: none)
  int64_t mod_revision = 0;  // revision of the last change
};

struct EtcdRange {
  int64_t revision = 0;  // store revision of the read
  std::vector<EtcdKeyValue> kvs;
};

class EtcdClient {
 public:
  // Validates `endpoints` ("http://HOST:PORT", optional trailing '/'):
  // InvalidArgument naming a bad one; at least one is required.
  static Result<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints,
                                                    std::chrono::milliseconds request_timeout);

  // Grants a lease of `ttl_seconds`; returns its id.
  Result<int64_t> Grant(int64_t ttl_seconds);
  // Renews `lease` once; returns the remaining TTL in seconds, 0 when etcd no
  // longer knows the lease (expired or revoked).
  Result<int64_t> KeepAlive(int64_t lease);
  // Revokes `lease` (deleting its keys). A lease etcd does not know is OK.
  Status Revoke(int64_t lease);
  // Puts key=value bound to `lease` (0: no lease).
  Status Put(std::string_view key, std::string_view value, int64_t lease);
  // Every key starting with `prefix`.
  Result<EtcdRange> RangePrefix(std::string_view prefix);

  // "http://a:2379,http://b:2379".
  std::string endpoints_text() const;

 private:
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds request_timeout);
  // POSTs `body` to `path` and returns the parsed reply (for streaming calls,
  // its "result" member), failing over across endpoints.
  Result<nlohmann::json> Call(std::string_view path, const nlohmann::json& body);

  const std::vector<std::string> endpoints_;  // normalized, no trailing '/'
  std::atomic<size_t> preferred_{0};          // index of the endpoint that answered last
  CurlClient http_;
};

std::string Base64Encode(std::string_view in);
// InvalidArgument on a character outside the alphabet or bad padding.
Result<std::string> Base64Decode(std::string_view in);
// The smallest key greater than every key with this prefix (etcd's range_end).
std::string PrefixRangeEnd(std::string_view prefix);

}  // namespace granary::cluster
