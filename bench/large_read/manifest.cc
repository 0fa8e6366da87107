#include "large_read/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace granary::bench {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr size_t kGenerateChunk = 4u << 20;

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool WriteAll(int fd, const char* p, size_t n, std::string* error) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *error = std::string("write: ") + std::strerror(errno);
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

StreamChecksum::StreamChecksum() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
StreamChecksum::~StreamChecksum() { XXH3_freeState(state_); }

void StreamChecksum::Update(const void* data, size_t n) { XXH3_64bits_update(state_, data, n); }

std::string StreamChecksum::Hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits_digest(state_)));
  return buf;
}

uint64_t PatternKey(uint64_t seed, std::string_view path) {
  return XXH3_64bits_withSeed(path.data(), path.size(), seed);
}

void FillPattern(uint64_t key, uint64_t offset, std::span<char> out) {
  uint64_t word = offset / 8 + 1;
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8, ++word) {
    uint64_t v = Mix(key + word * kGolden);
    std::memcpy(out.data() + i, &v, 8);
  }
  if (i < out.size()) {
    uint64_t v = Mix(key + word * kGolden);
    std::memcpy(out.data() + i, &v, out.size() - i);
  }
}

ManifestEntry GenerateFile(const std::string& root, const std::string& path, uint64_t bytes,
                           uint64_t seed, std::string* error) {
  ManifestEntry e{.path = path, .bytes = bytes};
  const std::filesystem::path full = std::filesystem::path(root) / path;
  std::error_code ec;
  std::filesystem::create_directories(full.parent_path(), ec);
  if (ec) {
    *error = full.parent_path().string() + ": " + ec.message();
    return e;
  }
  int fd = ::open(full.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = full.string() + ": " + std::strerror(errno);
    return e;
  }
  const uint64_t key = PatternKey(seed, path);
  std::vector<char> buf(kGenerateChunk);
  StreamChecksum sum;
  for (uint64_t off = 0; off < bytes && error->empty(); off += buf.size()) {
    std::span<char> chunk(buf.data(),
                          static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - off)));
    FillPattern(key, off, chunk);
    sum.Update(chunk.data(), chunk.size());
    if (!WriteAll(fd, chunk.data(), chunk.size(), error)) *error = full.string() + ": " + *error;
  }
  if (::close(fd) != 0 && error->empty())
    *error = full.string() + ": close: " + std::strerror(errno);
  e.xxh3 = sum.Hex();
  return e;
}

bool LoadManifest(const std::string& file, Manifest* out, std::string* error) {
  std::ifstream in(file);
  if (!in) {
    *error = file + ": cannot open";
    return false;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    out->seed = j.at("seed").get<uint64_t>();
    out->files.clear();
    for (const auto& f : j.at("files")) {
      out->files.push_back({.path = f.at("path").get<std::string>(),
                            .bytes = f.at("bytes").get<uint64_t>(),
                            .xxh3 = f.at("xxh3").get<std::string>()});
    }
  } catch (const nlohmann::json::exception& e) {
    *error = file + ": " + e.what();
    return false;
  }
  return true;
}

std::string ManifestToJson(const Manifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const ManifestEntry& e : m.files) {
    files.push_back({{"path", e.path}, {"bytes", e.bytes}, {"xxh3", e.xxh3}});
  }
  return nlohmann::json{{"seed", m.seed}, {"files", files}}.dump(1);
}

std::vector<ManifestEntry> Select(const Manifest& m, std::string_view prefix) {
  std::vector<ManifestEntry> out;
  for (const ManifestEntry& e : m.files) {
    if (std::string_view(e.path).starts_with(prefix)) out.push_back(e);
  }
  return out;
}

}  // namespace granary::bench
