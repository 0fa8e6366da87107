// Little-endian integer helpers shared by the frame and body codecs.
//
// Byte-by-byte shifts, so the encoding is the same on every host whatever its
// byte order or alignment rules.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace granary::net::wire {

inline void PutU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }

inline void PutU16(std::string& out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Reads `n` bytes (n <= 8) at p as a little-endian unsigned integer.
inline uint64_t GetLE(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

inline uint16_t GetU16(const char* p) { return static_cast<uint16_t>(GetLE(p, 2)); }
inline uint32_t GetU32(const char* p) { return static_cast<uint32_t>(GetLE(p, 4)); }
inline uint64_t GetU64(const char* p) { return GetLE(p, 8); }

}  // namespace granary::net::wire
