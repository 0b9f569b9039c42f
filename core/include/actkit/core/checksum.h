// CRC-32C (Castagnoli), the checksum of serialized payloads and records.
#pragma once

#include <cstddef>
#include <cstdint>

namespace actkit {

// CRC-32C of data[0, size), continuing from `crc` (0 to start). Uses the
// SSE4.2 instruction when the build targets it, a table otherwise; both give
// the same value.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

namespace detail {
// The table-driven path, always available; tests hold crc32c() to it.
uint32_t crc32c_table(const void* data, size_t size, uint32_t crc = 0);
}  // namespace detail

}  // namespace actkit
