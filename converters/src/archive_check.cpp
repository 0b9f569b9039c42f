#include "actkit/converters/archive_check.h"

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include <zlib.h>

#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "pickle/code_check.h"
#include "pickle/pickle_check.h"

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
// allocate more than a piece, unless `bytes` is given: then the record's bytes
// are appended to `bytes` (a pickle or code, which is checked whole).
uint32_t inflated_crc(const char* data, uint64_t size, uint64_t usize, const Reader& r, const std::string& name,
                      std::string* bytes = nullptr) {
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
    if (bytes) bytes->append(piece.data(), size_t(n));
  }
  inflateEnd(&z);
  if (out != usize) r.fail(c10::str("record ", name, " is damaged (it inflates to ", out, " bytes, not ", usize, ")"));
  return crc;
}

// Whether `name` is <folder>/version or <folder>/.data/version (in any
// case, as LibTorch's reader finds them): the format version.
bool is_version_record(const std::string& name, const std::string& folder) {
  const std::string lower = lowercase_name(name);
  return lower == lowercase_name(folder + "version") || lower == lowercase_name(folder + ".data/version");
}

// LibTorch's reader parses the version with std::stoull, so the text must
// start with a number below 10^18: else std::invalid_argument or
// std::out_of_range escapes the reader, where callers expect c10::Error.
void check_version(const std::string& text, const std::string& name) {
  size_t at = text.find_first_not_of(" \t\n\v\f\r");
  if (at == std::string::npos || text[at] < '0' || text[at] > '9') {
    throw FormatError(c10::str("record ", name, " is not a version number"));
  }
  while (at < text.size() && text[at] == '0') ++at;
  size_t digits = 0;
  while (at + digits < text.size() && text[at + digits] >= '0' && text[at + digits] <= '9') ++digits;
  if (digits > 18) throw FormatError(c10::str("record ", name, " holds a version number too large"));
}

// A record a parser reads (a pickle, code, the version), its bytes
// (inflated when it was deflated).
struct ParsedRecord {
  std::string name;
  std::string bytes;
};

// The version checked, all code checked (code_check.h) and every pickle
// walked (pickle_check.h) once every record is known, so that a storage or
// class a pickle names can be looked up. An archive with <folder>/constants.pkl or code is one
// LibTorch's TorchScript loader reads (InputArchive): its pickles may name
// only the globals that loader knows.
void check_parsed(const std::vector<ParsedRecord>& records, const RecordSizes& sizes, const std::string& folder,
                  const Reader& r) {
  try {
    ModuleCode code;
    bool torchscript = sizes.count(lowercase_name(folder + "constants.pkl")) != 0;
    for (const ParsedRecord& p : records) {
      if (is_version_record(p.name, folder)) check_version(p.bytes, p.name);
      if (is_code_record(p.name)) {
        code.add(p.bytes, p.name);
        torchscript = true;
      }
    }
    code.check_references();
    for (const ParsedRecord& p : records) {
      if (is_pickle_record(p.name)) check_pickle(p.bytes, p.name, sizes, torchscript ? &code : nullptr);
    }
  } catch (const FormatError& e) {
    r.fail(e.what());
  }
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
  RecordSizes sizes;  // by lowercase_name: LibTorch's reader finds a record in any case, so one name is one record
  std::vector<ParsedRecord> parsed;
  std::string folder;
  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < entries; ++i) {
    r.need(at, kCentralSize, "a directory entry");
    if (r.le(at, 4) != kCentralHeader) r.fail(c10::str("directory entry ", i, " is damaged"));
    const uint64_t method = r.le(at + 10, 2), crc = r.le(at + 16, 4);
    uint64_t size = r.le(at + 20, 4), usize = r.le(at + 24, 4), local = r.le(at + 42, 4);
    const uint64_t name_len = r.le(at + 28, 2), extra_len = r.le(at + 30, 2), comment_len = r.le(at + 32, 2);
    r.need(at + kCentralSize, name_len + extra_len + comment_len, "a directory entry's name");
    const std::string name = bytes.substr(size_t(at + kCentralSize), size_t(name_len));
    if (sizes.count(lowercase_name(name))) r.fail(c10::str("record ", name, " appears twice"));
    // LibTorch's reader finds every record in the first one's folder.
    if (i == 0) folder = name.substr(0, name.find('/') + 1);
    if (folder.empty() || name.compare(0, folder.size(), folder) != 0) {
      r.fail(c10::str("record ", name, " is not in the archive's folder ", folder.empty() ? name : folder));
    }
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
    std::string* inflated = nullptr;
    if (is_pickle_record(name) || is_code_record(name) || is_version_record(name, folder)) {
      parsed.push_back({name, stored ? bytes.substr(size_t(data), size_t(size)) : std::string()});
      if (deflated) inflated = &parsed.back().bytes;
    }
    const uint32_t actual = stored ? crc32_zip(bytes.data() + data, size_t(size))
                                   : inflated_crc(bytes.data() + data, size, usize, r, name, inflated);
    if (actual != crc) {
      r.fail(c10::str("record ", name, " is damaged (its CRC-32 is ", actual, ", the archive recorded ", crc, ")"));
    }
    sizes[lowercase_name(name)] = usize;
    at += kCentralSize + name_len + extra_len + comment_len;
  }
  check_parsed(parsed, sizes, folder, r);
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
