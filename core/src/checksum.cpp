#include "actkit/core/checksum.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace actkit {
namespace {

// Reflected CRC-32C polynomial, and zip's (IEEE 802.3) reflected polynomial.
constexpr uint32_t kPoly = 0x82f63b78u;
constexpr uint32_t kZipPoly = 0xedb88320u;

constexpr std::array<uint32_t, 256> make_table(uint32_t poly) {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? poly : 0u);
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = make_table(kPoly);
constexpr std::array<std::array<uint32_t, 256>, 8> make_zip_tables() {
  // Slicing by 8: table k advances a byte followed by k zero bytes.
  std::array<std::array<uint32_t, 256>, 8> t{};
  t[0] = make_table(kZipPoly);
  for (int k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t[size_t(k)][i] = (t[size_t(k - 1)][i] >> 8) ^ t[0][t[size_t(k - 1)][i] & 0xffu];
  }
  return t;
}
constexpr std::array<std::array<uint32_t, 256>, 8> kZipTables = make_zip_tables();

}  // namespace

uint32_t detail::crc32c_table(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; size > 0; --size, ++p) c = (c >> 8) ^ kTable[(c ^ *p) & 0xffu];
  return ~c;
}

#if defined(__x86_64__)
namespace {

// The CRC-32C instruction (SSE 4.2, every x86-64 since 2008), taken when the
// processor has it: the build itself targets the baseline.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  uint64_t c64 = c;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = uint32_t(c64);
  for (; size > 0; --size, ++p) c = _mm_crc32_u8(c, *p);
  return ~c;
}

}  // namespace
#endif

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return crc32c_sse42(data, size, crc);
#endif
  return detail::crc32c_table(data, size, crc);
}

uint32_t crc32_zip(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  const auto& t = kZipTables;
  for (; size >= 8; size -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
  }
  for (; size > 0; --size, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xffu];
  return ~c;
}

uint32_t content_checksum(const void* data, size_t size) {
  if (size <= 4) return crc32c(data, size);
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t tail;
  std::memcpy(&tail, p + size - 4, 4);
  // splitmix64's finalizer, a bijection on 64 bits.
  uint64_t x = (uint64_t(crc32c(p, size - 4)) << 32 | tail) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return uint32_t(x ^ (x >> 32));
}

}  // namespace actkit
