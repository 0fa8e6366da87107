// Peer-list and HOST:PORT parsing. See membership.h.
#include "cluster/membership.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

namespace granary::cluster {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// An RFC 1123 host name: dot-separated labels of letters, digits and '-'
// (not at either end), 1-63 characters each, 253 in all.
bool IsHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t start = 0;
  while (start <= host.size()) {
    size_t dot = host.find('.', start);
    if (dot == std::string_view::npos) dot = host.size();
    std::string_view label = host.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
    start = dot + 1;
  }
  return true;
}

// True when `host` looks like dotted digits, so it must be a valid IPv4 address.
bool LooksNumeric(std::string_view host) {
  return std::all_of(host.begin(), host.end(), [](char c) {
    return c == '.' || std::isdigit(static_cast<unsigned char>(c));
  });
}

Status NotHostPort(std::string_view text, std::string_view why) {
  std::string msg = "'" + std::string(text) + "' is not HOST:PORT";
  if (!why.empty()) msg += " (" + std::string(why) + ")";
  return InvalidArgument(std::move(msg));
}

}  // namespace

Result<HostPort> ParseHostPort(std::string_view text) {
  HostPort out;
  std::string_view host;
  std::string_view port;
  if (text.starts_with("[")) {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return NotHostPort(text, "IPv6 addresses are written [ADDR]:PORT");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    in6_addr addr6{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &addr6) != 1) {
      return NotHostPort(text, "bad IPv6 address");
    }
    out.ipv6 = true;
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return NotHostPort(text, "");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return NotHostPort(text, "IPv6 addresses are written [ADDR]:PORT");
    }
    if (LooksNumeric(host)) {
      in_addr addr4{};
      if (inet_pton(AF_INET, std::string(host).c_str(), &addr4) != 1) {
        return NotHostPort(text, "bad IPv4 address");
      }
    } else if (!IsHostName(host)) {
      return NotHostPort(text, "bad host name");
    }
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return NotHostPort(text, "port must be 1-65535");
  }
  out.host = std::string(host);
  out.port = static_cast<uint16_t>(value);
  return out;
}

Result<std::vector<Member>> ParsePeerList(std::string_view csv, uint64_t default_capacity) {
  std::vector<Member> members;
  if (Trim(csv).empty()) return members;
  std::set<std::string, std::less<>> seen;
  size_t start = 0;
  while (start <= csv.size()) {
    size_t comma = csv.find(',', start);
    if (comma == std::string_view::npos) comma = csv.size();
    std::string_view entry = Trim(csv.substr(start, comma - start));
    start = comma + 1;
    if (entry.empty())
      return InvalidArgument("--cluster-peers: empty entry in '" + std::string(csv) + "'");
    auto parsed = ParseHostPort(entry);
    if (!parsed.ok()) return parsed.status().WithContext("--cluster-peers");
    if (!seen.emplace(entry).second) {
      return InvalidArgument("--cluster-peers: '" + std::string(entry) + "' is listed twice");
    }
    members.push_back(Member{.node_id = std::string(entry),
                             .address = std::string(entry),
                             .capacity = default_capacity});
  }
  return members;
}

std::string PeerListFromFileText(std::string_view text) {
  std::string out;
  std::string entry;
  bool comment = false;
  auto flush = [&] {
    if (entry.empty()) return;
    out += (out.empty() ? "" : ",") + entry;
    entry.clear();
  };
  for (char c : text) {
    if (c == '\n') comment = false;
    if (comment) continue;
    if (c == '#') {
      comment = true;
      flush();
    } else if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      flush();
    } else {
      entry += c;
    }
  }
  flush();
  return out;
}

Result<std::string> ReadPeerListFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoStatus("peer list file " + path, errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError("peer list file " + path + ": read failed");
  std::string list = PeerListFromFileText(text.str());
  if (list.empty()) return InvalidArgument("peer list file " + path + " lists no member");
  return list;
}

}  // namespace granary::cluster
