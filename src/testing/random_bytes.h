// Test data: deterministic pseudo-random bytes (the same for a seed on every
// run and machine), for unit and integration tests alike.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace granary::testing {

inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

}  // namespace granary::testing
