// Deterministic record contents for the store tests: the version in the
// first 8 bytes, then bytes derived from key and version.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace actkit::test {

inline std::vector<uint8_t> store_payload(const std::string& key, uint64_t version, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  uint64_t h = version * 0x9e3779b97f4a7c15ull;
  for (char c : key) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    out[i] = uint8_t(h >> 56);
  }
  if (bytes > 0) std::memcpy(out.data(), &version, std::min(bytes, sizeof(version)));
  return out;
}

inline uint64_t store_payload_version(const std::vector<uint8_t>& data) {
  uint64_t v = 0;
  if (!data.empty()) std::memcpy(&v, data.data(), std::min(data.size(), sizeof(v)));
  return v;
}

}  // namespace actkit::test
