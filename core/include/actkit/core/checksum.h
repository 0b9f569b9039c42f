// CRC-32C (Castagnoli), the checksum of serialized payloads and records.
#pragma once

#include <cstddef>
#include <cstdint>

namespace actkit {

// CRC-32C of data[0, size), continuing from `crc` (0 to start). Uses the
// SSE4.2 instruction when the build targets it, a table otherwise; both give
// the same value.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// CRC-32 as zip and gzip compute it (IEEE 802.3 polynomial), continuing
// from `crc` (0 to start): the checksum torch.save's archives carry per
// record. Table-driven, 8 bytes a step.
uint32_t crc32_zip(const void* data, size_t size, uint32_t crc = 0);

// A checksum of data[0, size) for telling two byte strings apart (is this
// the value the other side holds?), where crc32c() cannot be used alone:
// every serialized payload ends with the CRC-32C of what precedes it, and
// CRC-32C over a string followed by its own CRC-32C is one constant (the
// CRC's residue), whatever the string. So the last 4 bytes are mixed in
// apart from the CRC-32C of the rest, through a 64-bit bijection: two
// strings of one length that differ anywhere collide with probability
// about 2^-32. Strings of up to 4 bytes take crc32c() alone.
uint32_t content_checksum(const void* data, size_t size);

namespace detail {
// The table-driven path, always available; tests hold crc32c() to it.
uint32_t crc32c_table(const void* data, size_t size, uint32_t crc = 0);
}  // namespace detail

}  // namespace actkit
