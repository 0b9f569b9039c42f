// The record store's file format (docs/formats.md), shared by its write path
// (record_store.cpp) and its recovery scan (record_store_recovery.cpp).
#pragma once

#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "actkit/swap/io_engine.h"

namespace actkit::record_format {

constexpr uint64_t kMagic = 0x44524f4345524b41ull;  // "AKRECORD", little-endian
constexpr uint16_t kRecordStoreVersion = 1;
constexpr uint16_t kTombstone = 1;
constexpr size_t kHeaderBytes = 64;
constexpr size_t kMaxKey = 4000;         // a tombstone (header + key) fits one 4 KiB block
constexpr size_t kScanWindow = 8 << 20;  // recovery reads the file in pieces this large

// On-disk header, little-endian (every supported target is).
struct RecordHeader {
  uint64_t magic;
  uint16_t version;
  uint16_t flags;
  uint32_t key_len;
  uint64_t payload_len;
  uint64_t sequence;
  uint32_t body_crc;    // CRC-32C of key then payload
  uint32_t header_crc;  // CRC-32C of the 36 bytes above
  uint8_t reserved[24];
};
static_assert(sizeof(RecordHeader) == kHeaderBytes, "record header is 64 bytes");
constexpr size_t kHeaderCrcSpan = offsetof(RecordHeader, header_crc);

inline uint64_t extent_for(uint64_t key_len, uint64_t payload_len) {
  return round_up_io(kHeaderBytes + key_len + payload_len);
}

// Parses a header; false if the bytes are not one (free space, garbage, a
// header torn mid-write).
inline bool parse_header(const uint8_t* p, RecordHeader* h) {
  std::memcpy(h, p, sizeof(*h));
  if (h->magic != kMagic || h->version != kRecordStoreVersion) return false;
  if (crc32c(p, kHeaderCrcSpan) != h->header_crc) return false;
  if (h->key_len == 0 || h->key_len > kMaxKey) return false;
  return h->payload_len <= (uint64_t(1) << 48);
}

inline void check_key(const std::string& key) {
  if (key.empty() || key.size() > kMaxKey) {
    throw InvalidInput(c10::str("record keys must be 1..", kMaxKey, " bytes, got ", key.size()));
  }
}

// pread until `len` bytes or end of file; returns the bytes read.
inline size_t read_fully(const IoFile& f, uint8_t* into, size_t len, uint64_t offset) {
  size_t got = 0;
  while (got < len) {
    const ssize_t r = ::pread(f.fd(), into + got, len - got, off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw IoError(c10::str("cannot read ", f.path(), " at offset ", offset + got, ": ", std::strerror(errno)), errno);
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

inline void sync_file(const IoFile& f) {
  if (::fdatasync(f.fd()) != 0) {
    throw IoError(c10::str("fdatasync of ", f.path(), " failed: ", std::strerror(errno)), errno);
  }
}

}  // namespace actkit::record_format
