// NodeIdentity: the node id file of a cache directory. See node_identity.h.
#include "cluster/node_identity.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <cerrno>
#include <sstream>

#include "common/log.h"
#include "common/replace_file.h"

namespace granary::cluster {
namespace {

constexpr std::string_view kMagic = "granary-node-id";
constexpr int kVersion = 1;
constexpr size_t kIdHexDigits = 32;

std::string Hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

std::string Checksum(std::string_view id) {
  const uint64_t h = XXH3_64bits(id.data(), id.size());
  std::array<uint8_t, 8> be{};
  for (int i = 0; i < 8; ++i) be[i] = static_cast<uint8_t>(h >> (56 - 8 * i));
  return Hex(be.data(), be.size());
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<std::string> FreshId() {
  std::array<uint8_t, kIdHexDigits / 2> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("getrandom", errno);
    got += static_cast<size_t>(n);
  }
  return Hex(bytes.data(), bytes.size());
}

Status WriteIdFile(const std::string& path, std::string_view id) {
  return ReplaceFileContents(path, EncodeNodeIdFile(id), {.durable = true});
}

}  // namespace

std::string EncodeNodeIdFile(std::string_view id) {
  return std::string(kMagic) + " " + std::to_string(kVersion) + " " + std::string(id) + " " +
         Checksum(id) + "\n";
}

Result<std::string> DecodeNodeIdFile(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic, id, sum;
  int version = 0;
  if (!(in >> magic >> version >> id >> sum) || magic != kMagic) {
    return Corruption("node id file: not '" + std::string(kMagic) + " VERSION ID CHECKSUM'");
  }
  if (version != kVersion) {
    return Corruption("node id file: version " + std::to_string(version) + ", this build reads " +
                      std::to_string(kVersion));
  }
  if (id.size() != kIdHexDigits || !IsLowerHex(id)) {
    return Corruption("node id file: id is not " + std::to_string(kIdHexDigits) + " hex digits");
  }
  if (sum != Checksum(id)) return Corruption("node id file: checksum mismatch");
  std::string rest;
  if (in >> rest) return Corruption("node id file: trailing text");
  return id;
}

Result<std::string> LoadOrCreateNodeId(const std::string& dir) {
  const std::string path = dir + "/" + std::string(kNodeIdFile);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::string text(256, '\0');
    const ssize_t n = ::read(fd, text.data(), text.size());
    const int err = errno;
    ::close(fd);
    if (n < 0) return ErrnoStatus("read " + path, err);
    text.resize(static_cast<size_t>(n));
    auto id = DecodeNodeIdFile(text);
    if (id.ok()) return id;
    GLOG_WARN("cluster: {}: {}; this node joins as a new member", path, id.status().ToString());
  } else if (errno != ENOENT) {
    return ErrnoStatus("open " + path, errno);
  }
  ASSIGN_OR_RETURN(std::string id, FreshId());
  RETURN_IF_ERROR(WriteIdFile(path, id));
  return id;
}

}  // namespace granary::cluster
