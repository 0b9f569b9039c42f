// Deterministic record contents for the store tests: the version in the
// first 8 bytes, then bytes derived from key and version; and record sizes
// derived the same way, so a reader can check a record it did not write.
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

// A size in [8, max_bytes] (so the version fits) for `key` at `version`: a
// third of them under a block, a third under a 64 KiB chunk, a third
// anywhere up to max_bytes, so that space a record leaves is reused by
// records of other sizes. max_bytes >= 8.
inline size_t store_payload_size(const std::string& key, uint64_t version, size_t max_bytes) {
  uint64_t h = (version + 1) * 0xd6e8feb86659fd93ull;
  for (char c : key) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  const size_t limits[] = {4000, 65000, max_bytes};
  return 8 + size_t((h >> 2) % (std::min(max_bytes, limits[h % 3]) - 7));
}

}  // namespace actkit::test
