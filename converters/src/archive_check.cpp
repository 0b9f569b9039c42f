#include "actkit/converters/archive_check.h"

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>

#include <zlib.h>

#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"

namespace actkit {
namespace {

// Zip's signatures and fixed sizes (APPNOTE 6.3: 4.3.7, 4.3.12, 4.3.14-16).
constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50;
constexpr uint32_t kZip64End = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr size_t kEndSize = 22, kLocatorSize = 20, kZip64EndSize = 56, kCentralSize = 46, kLocalSize = 30;
constexpr uint16_t kZip64Extra = 0x0001;

// Little-endian reads, each bounds-checked against the archive.
class Reader {
 public:
  Reader(const std::string& bytes, const std::string& what) : b_(bytes), what_(what) {}
  uint64_t le(uint64_t at, int n) const {
    need(at, uint64_t(n), "a field");
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | uint8_t(b_[size_t(at) + size_t(i)]);
    return v;
  }
  void need(uint64_t at, uint64_t n, const char* part) const {
    if (at > b_.size() || n > b_.size() - at) fail(c10::str(part, " at byte ", at, " runs past the end of the file"));
  }
  [[noreturn]] void fail(const std::string& why) const { throw FormatError(c10::str(what_, ": ", why)); }
  const std::string& bytes() const { return b_; }

 private:
  const std::string& b_;
  const std::string& what_;
};

// The CRC-32 of a deflated record's `size` bytes at `data`, inflated to
// exactly `usize` bytes (what the directory says; a stream that inflates to
// more or less is damaged). Inflates in pieces, so a record cannot make it
// allocate more than a piece.
uint32_t inflated_crc(const char* data, uint64_t size, uint64_t usize, const Reader& r, const std::string& name) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) r.fail("cannot start zlib");
  std::string piece(1 << 16, '\0');
  uint32_t crc = 0;
  uint64_t out = 0;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = uInt(std::min<uint64_t>(size, UINT32_MAX));
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(piece.data());
    z.avail_out = uInt(piece.size());
    rc = inflate(&z, Z_NO_FLUSH);
    const uint64_t n = piece.size() - z.avail_out;
    out += n;
    if ((rc != Z_OK && rc != Z_STREAM_END) || out > usize || (rc == Z_OK && n == 0 && z.avail_in == 0)) {
      inflateEnd(&z);
      r.fail(c10::str("record ", name, " is damaged (its deflated bytes do not inflate to ", usize, ")"));
    }
    crc = crc32_zip(piece.data(), size_t(n), crc);
  }
  inflateEnd(&z);
  if (out != usize) r.fail(c10::str("record ", name, " is damaged (it inflates to ", out, " bytes, not ", usize, ")"));
  return crc;
}

}  // namespace

void check_archive(const std::string& bytes, const std::string& what) {
  const Reader r(bytes, what);
  if (bytes.size() < kEndSize) r.fail("is not a torch.save file (too short for a zip archive)");
  // The end record: the last 22 bytes, or earlier by its comment (< 64 KiB).
  uint64_t end = bytes.size() - kEndSize;
  const uint64_t lowest = bytes.size() > kEndSize + 0xffff ? bytes.size() - kEndSize - 0xffff : 0;
  while (r.le(end, 4) != kEnd || end + kEndSize + r.le(end + 20, 2) != bytes.size()) {
    if (end == lowest) r.fail("is not a torch.save file, or is truncated (no zip end record)");
    --end;
  }
  uint64_t entries = r.le(end + 10, 2), cd_size = r.le(end + 12, 4), cd_offset = r.le(end + 16, 4);
  if (entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    if (end < kLocatorSize || r.le(end - kLocatorSize, 4) != kZip64Locator) r.fail("no zip64 locator");
    const uint64_t at = r.le(end - kLocatorSize + 8, 8);
    r.need(at, kZip64EndSize, "the zip64 end record");
    if (r.le(at, 4) != kZip64End) r.fail("no zip64 end record where its locator points");
    entries = r.le(at + 32, 8);
    cd_size = r.le(at + 40, 8);
    cd_offset = r.le(at + 48, 8);
  }
  r.need(cd_offset, cd_size, "the central directory");
  if (entries > cd_size / kCentralSize) r.fail(c10::str(entries, " records cannot fit a directory of ", cd_size, " bytes"));
  std::set<std::string> names;
  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < entries; ++i) {
    r.need(at, kCentralSize, "a directory entry");
    if (r.le(at, 4) != kCentralHeader) r.fail(c10::str("directory entry ", i, " is damaged"));
    const uint64_t method = r.le(at + 10, 2), crc = r.le(at + 16, 4);
    uint64_t size = r.le(at + 20, 4), usize = r.le(at + 24, 4), local = r.le(at + 42, 4);
    const uint64_t name_len = r.le(at + 28, 2), extra_len = r.le(at + 30, 2), comment_len = r.le(at + 32, 2);
    r.need(at + kCentralSize, name_len + extra_len + comment_len, "a directory entry's name");
    const std::string name = bytes.substr(size_t(at + kCentralSize), size_t(name_len));
    if (!names.insert(name).second) r.fail(c10::str("record ", name, " appears twice"));
    // Sizes and offset that do not fit 32 bits are in the zip64 extra field, in this order.
    for (uint64_t e = at + kCentralSize + name_len, e_end = e + extra_len; e + 4 <= e_end;) {
      const uint64_t id = r.le(e, 2), len = r.le(e + 2, 2);
      if (e + 4 + len > e_end) r.fail(c10::str("record ", name, ": a damaged extra field"));
      if (id == kZip64Extra) {
        uint64_t f = e + 4;
        for (uint64_t* v : {&usize, &size, &local}) {
          if (*v == 0xffffffff) {
            if (f + 8 > e + 4 + len) r.fail(c10::str("record ", name, ": a short zip64 field"));
            *v = r.le(f, 8);
            f += 8;
          }
        }
      }
      e += 4 + len;
    }
    const bool stored = method == 0, deflated = method == 8;
    if (!stored && !deflated) r.fail(c10::str("record ", name, " uses zip method ", method, " (not stored or deflated)"));
    if (stored && size != usize) r.fail(c10::str("record ", name, ": its sizes disagree"));
    r.need(local, kLocalSize, "a record's header");
    if (r.le(local, 4) != kLocalHeader) r.fail(c10::str("record ", name, ": its header is damaged"));
    const uint64_t data = local + kLocalSize + r.le(local + 26, 2) + r.le(local + 28, 2);
    r.need(data, size, c10::str("record ", name).c_str());
    const uint32_t actual = stored ? crc32_zip(bytes.data() + data, size_t(size))
                                   : inflated_crc(bytes.data() + data, size, usize, r, name);
    if (actual != crc) {
      r.fail(c10::str("record ", name, " is damaged (its CRC-32 is ", actual, ", the archive recorded ", crc, ")"));
    }
    at += kCentralSize + name_len + extra_len + comment_len;
  }
}

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&](const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  return bytes;
}

std::string read_checked_archive(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(c10::str("cannot read ", path, ": ", std::strerror(errno)), errno);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError(c10::str("cannot read ", path), EIO);
  check_archive(bytes, path);
  return bytes;
}

}  // namespace actkit
