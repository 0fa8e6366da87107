// EtcdClient implementation: JSON gateway calls with endpoint failover. See
// etcd_client.h.
#include "cluster/etcd_client.h"

#include <utility>

#include "cluster/membership.h"

namespace granary::cluster {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int DecodeChar(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// An int64 the gateway writes as a decimal string (or, leniently, a number);
// absent fields are 0 (proto3 omits defaults).
int64_t JsonInt(const nlohmann::json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

// The message of a gateway error body ({"error": "...", "message": "...", "code": N}).
std::string ErrorMessage(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    const nlohmann::json* e = &j;
    if (j.contains("error") && j["error"].is_object()) e = &j["error"];
    for (const char* f : {"message", "error"}) {
      if (e->contains(f) && (*e)[f].is_string()) return (*e)[f].get<std::string>();
    }
  }
  return body.substr(0, 200);
}

Status ValidateEndpoint(const std::string& endpoint) {
  std::string_view rest = endpoint;
  if (!rest.starts_with("http://")) {
    return InvalidArgument("etcd endpoint '" + endpoint + "': expected http://HOST:PORT");
  }
  rest.remove_prefix(7);
  if (rest.ends_with("/")) rest.remove_suffix(1);
  auto hp = ParseHostPort(rest);
  if (!hp.ok()) {
    return InvalidArgument("etcd endpoint '" + endpoint + "': expected http://HOST:PORT");
  }
  return Status::Ok();
}

}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) return InvalidArgument("base64: length not a multiple of 4");
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int pad = 0;
    if (last && in[i + 3] == '=') pad = in[i + 2] == '=' ? 2 : 1;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      int d = k >= 4 - static_cast<size_t>(pad) ? 0 : DecodeChar(in[i + k]);
      if (d < 0) return InvalidArgument("base64: bad character");
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // etcd: "\0" as range_end means "every key"
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints,
                                                       std::chrono::milliseconds request_timeout) {
  if (endpoints.empty()) return InvalidArgument("etcd: no endpoints given");
  for (std::string& e : endpoints) {
    RETURN_IF_ERROR(ValidateEndpoint(e));
    if (e.ends_with("/")) e.pop_back();
  }
  if (request_timeout.count() <= 0) return InvalidArgument("etcd: request timeout must be > 0");
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(endpoints), request_timeout));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints,
                       std::chrono::milliseconds request_timeout)
    : endpoints_(std::move(endpoints)),
      http_(CurlClientOptions{.max_in_flight = 8,
                              .connect_timeout = request_timeout,
                              .request_timeout = request_timeout}) {}

std::string EtcdClient::endpoints_text() const {
  std::string out;
  for (const std::string& e : endpoints_) out += (out.empty() ? "" : ",") + e;
  return out;
}

Result<nlohmann::json> EtcdClient::Call(std::string_view path, const nlohmann::json& body) {
  const std::string text = body.dump();
  const size_t first = preferred_.load(std::memory_order_relaxed) % endpoints_.size();
  std::string failures;
  for (size_t n = 0; n < endpoints_.size(); ++n) {
    const size_t idx = (first + n) % endpoints_.size();
    const std::string& endpoint = endpoints_[idx];
    auto r = http_.Send(HttpRequest{.method = "POST",
                                    .url = endpoint + std::string(path),
                                    .headers = {{"Content-Type", "application/json"}},
                                    .body = text});
    if (!r.ok()) {
      failures += (failures.empty() ? "etcd " : "; ") + endpoint + ": connect failed (" +
                  r.status().message() + ")";
      continue;
    }
    if (r->status >= 500) {
      failures += (failures.empty() ? "etcd " : "; ") + endpoint + ": " + std::string(path) +
                  ": HTTP " + std::to_string(r->status) + " " + ErrorMessage(r->body);
      continue;
    }
    preferred_.store(idx, std::memory_order_relaxed);
    if (r->status != 200) {
      Status s(r->status == 404 ? Code::kNotFound : Code::kInvalidArgument,
               "etcd " + endpoint + ": " + std::string(path) + ": HTTP " +
                   std::to_string(r->status) + " " + ErrorMessage(r->body));
      return s;
    }
    // A streaming call's reply may hold several newline-separated messages; the first is ours.
    std::string_view reply = r->body;
    if (size_t nl = reply.find('\n'); nl != std::string_view::npos) reply = reply.substr(0, nl);
    auto j = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return Unavailable("etcd " + endpoint + ": " + std::string(path) + ": reply is not JSON");
    }
    if (j.contains("error")) {
      return Unavailable("etcd " + endpoint + ": " + std::string(path) + ": " +
                         ErrorMessage(std::string(reply)));
    }
    if (j.contains("result") && j["result"].is_object()) return j["result"];
    return j;
  }
  return Unavailable(failures);
}

Result<int64_t> EtcdClient::Grant(int64_t ttl_seconds) {
  ASSIGN_OR_RETURN(nlohmann::json j,
                   Call("/v3/lease/grant", {{"TTL", std::to_string(ttl_seconds)}}));
  if (j.contains("error") && j["error"].is_string() && !j["error"].get<std::string>().empty()) {
    return Unavailable("etcd: lease grant: " + j["error"].get<std::string>());
  }
  const int64_t id = JsonInt(j, "ID");
  if (id == 0) return Unavailable("etcd: lease grant: reply has no lease id");
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  ASSIGN_OR_RETURN(nlohmann::json j, Call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}));
  return JsonInt(j, "TTL");
}

Status EtcdClient::Revoke(int64_t lease) {
  auto r = Call("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
  if (!r.ok() && r.status().code() == Code::kNotFound) return Status::Ok();
  if (!r.ok() && r.status().message().find("lease not found") != std::string::npos) {
    return Status::Ok();
  }
  return r.status();
}

Status EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  nlohmann::json body = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  return Call("/v3/kv/put", body).status();
}

Result<EtcdRange> EtcdClient::RangePrefix(std::string_view prefix) {
  ASSIGN_OR_RETURN(nlohmann::json j,
                   Call("/v3/kv/range", {{"key", Base64Encode(prefix)},
                                         {"range_end", Base64Encode(PrefixRangeEnd(prefix))}}));
  EtcdRange out;
  if (j.contains("header") && j["header"].is_object())
    out.revision = JsonInt(j["header"], "revision");
  if (!j.contains("kvs")) return out;
  if (!j["kvs"].is_array()) return Unavailable("etcd: range reply: kvs is not a list");
  for (const nlohmann::json& kv : j["kvs"]) {
    if (!kv.is_object()) continue;
    auto key = Base64Decode(kv.value("key", ""));
    auto value = Base64Decode(kv.value("value", ""));
    if (!key.ok() || !value.ok()) return Unavailable("etcd: range reply: bad base64");
    out.kvs.push_back(EtcdKeyValue{.key = std::move(*key),
                                   .value = std::move(*value),
                                   .lease = JsonInt(kv, "lease"),
                                   .mod_revision = JsonInt(kv, "mod_revision")});
  }
  return out;
}

}  // namespace granary::cluster
