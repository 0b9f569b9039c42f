// Serialized form of a CompressedTensor (docs/formats.md, "Payload v1"):
//
//   0   4  magic "ACTK"
//   4   2  format version (1)
//   6   1  codec kind
//   7   1  dtype code
//   8   1  bits (0: per-sample bits follow the shape)
//   9   1  metadata format (0 bf16, 1 fp16)
//   10  1  rank
//   11  1  reserved, 0
//   12  4  group size (0 unless per-group)
//   16  8  payload bytes
//   24  8 * rank  dimensions
//   ..  N  per-sample bits, when bits == 0 (per-group codec)
//   ..  16 codec extension (DirectQ and TAH only):
//          0 1 flags: bit 0 per-channel scales (DirectQ); other bits 0
//          1 1 low bits (TAH), else 0
//          2 6 reserved, 0
//          8 8 high-token count (TAH), else 0
//   ..  payload bytes: metadata then the codes
//   ..  4  CRC-32C of everything before it
//
// All integers little-endian. Parsing checks every length against the bytes
// it was given before reading them.
#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cstring>

#include "actkit/core/checksum.h"
#include "actkit/core/compressed_tensor.h"
#include "actkit/core/errors.h"
#include "actkit/kernels/pergroup.h"
#include "byte_io.h"
#include "dispatch.h"

namespace actkit {
namespace {

using detail::Reader;
using detail::Writer;

constexpr char kMagic[4] = {'A', 'C', 'T', 'K'};
constexpr uint16_t kFormatVersion = 1;
constexpr size_t kFixedHeader = 24;
constexpr size_t kChecksumBytes = 4;
constexpr size_t kExtensionBytes = 16;
constexpr uint8_t kFlagPerChannel = 1;
constexpr uint8_t kFlagFullGrid = 2;

struct DtypeCode {
  at::ScalarType type;
  uint8_t code;
};
constexpr DtypeCode kDtypes[] = {
    {at::kFloat, 0}, {at::kHalf, 1}, {at::kBFloat16, 2}, {at::kBool, 3},
    {at::kByte, 4},  {at::kInt, 5},  {at::kLong, 6},
};

uint8_t dtype_code(at::ScalarType t) {
  for (const auto& d : kDtypes) {
    if (d.type == t) return d.code;
  }
  throw InvalidInput(c10::str("serialize: dtype ", t, " has no payload code"));
}

at::ScalarType dtype_from_code(uint8_t code) {
  for (const auto& d : kDtypes) {
    if (d.code == code) return d.type;
  }
  throw FormatError(c10::str("payload: unknown dtype code ", int(code)));
}

// The kinds added after the first ones carry their extra fields in an
// extension, so the older kinds' bytes never changed.
bool has_extension(CodecKind kind) { return kind == CodecKind::kDirectQ || kind == CodecKind::kTah; }

size_t header_bytes(const CompressedMeta& m) {
  const size_t tail = has_extension(m.kind) ? kExtensionBytes : (m.bits == 0 ? m.sample_bits.size() : 0);
  return kFixedHeader + 8 * m.shape.size() + tail;
}

}  // namespace

size_t CompressedTensor::serialized_size() const {
  return header_bytes(meta_) + size_t(meta_.payload_bytes()) + kChecksumBytes;
}

size_t CompressedTensor::serialize_into(uint8_t* dst, size_t capacity) const {
  if (!defined()) throw InvalidInput("serialize: the CompressedTensor is empty");
  const size_t total = serialized_size();
  if (capacity < total) {
    throw InvalidInput(c10::str("serialize: buffer of ", capacity, " bytes, ", total, " needed"));
  }
  Writer w(dst);
  w.put_bytes(kMagic, 4);
  w.put<uint16_t>(kFormatVersion);
  w.put<uint8_t>(uint8_t(meta_.kind));
  w.put<uint8_t>(dtype_code(meta_.dtype));
  w.put<uint8_t>(uint8_t(meta_.bits));
  w.put<uint8_t>(uint8_t(meta_.meta_format));
  w.put<uint8_t>(uint8_t(meta_.shape.size()));
  w.put<uint8_t>(0);
  w.put<uint32_t>(uint32_t(meta_.group_size));
  w.put<uint64_t>(uint64_t(meta_.payload_bytes()));
  for (int64_t d : meta_.shape) w.put<int64_t>(d);
  if (has_extension(meta_.kind)) {
    w.put<uint8_t>(uint8_t((meta_.per_channel ? kFlagPerChannel : 0) | (meta_.full_grid ? kFlagFullGrid : 0)));
    w.put<uint8_t>(uint8_t(meta_.low_bits));
    for (int i = 0; i < 6; ++i) w.put<uint8_t>(0);
    w.put<int64_t>(meta_.high_tokens);
  } else if (meta_.bits == 0) {
    w.put_bytes(meta_.sample_bits.data(), meta_.sample_bits.size());
  }
  const at::Tensor host = payload_.device().is_cpu() ? payload_ : payload_.cpu();
  w.put_bytes(host.data_ptr<uint8_t>(), size_t(meta_.payload_bytes()));
  w.put<uint32_t>(crc32c(dst, size_t(w.pos() - dst)));
  return total;
}

std::vector<uint8_t> CompressedTensor::serialize() const {
  std::vector<uint8_t> out(serialized_size());
  serialize_into(out.data(), out.size());
  return out;
}

CompressedTensor CompressedTensor::deserialize(const uint8_t* data, size_t size, at::Device device) {
  if (data == nullptr && size != 0) throw FormatError("payload: null buffer");
  Reader r(data, size);
  if (std::memcmp(r.take(4, "magic"), kMagic, 4) != 0) throw FormatError("payload: bad magic (not an ACTkit payload)");
  const auto version = r.get<uint16_t>("version");
  if (version != kFormatVersion) {
    throw FormatError(c10::str("payload: format version ", version, " is not supported (this build reads ",
                               kFormatVersion, ")"));
  }
  CompressedMeta m;
  m.kind = CodecKind(r.get<uint8_t>("codec kind"));
  m.dtype = dtype_from_code(r.get<uint8_t>("dtype"));
  m.bits = r.get<uint8_t>("bits");
  m.meta_format = MetaFormat(r.get<uint8_t>("metadata format"));
  const auto rank = r.get<uint8_t>("rank");
  if (r.get<uint8_t>("reserved") != 0) throw FormatError("payload: reserved byte is not zero");
  const auto group_size = r.get<uint32_t>("group size");
  if (group_size > uint32_t(kernels::kMaxGroupSize)) {
    throw FormatError(c10::str("payload: group size ", group_size, " exceeds ", kernels::kMaxGroupSize));
  }
  m.group_size = int(group_size);
  const auto declared_payload = r.get<uint64_t>("payload size");
  if (rank > 16) throw FormatError(c10::str("payload: rank ", int(rank), " exceeds 16"));
  m.shape.resize(rank);
  for (auto& d : m.shape) d = r.get<int64_t>("dimension");
  if (has_extension(m.kind)) {
    const auto flags = r.get<uint8_t>("extension flags");
    if ((flags & ~(kFlagPerChannel | kFlagFullGrid)) != 0) {
      throw FormatError(c10::str("payload: unknown extension flags ", int(flags)));
    }
    m.per_channel = (flags & kFlagPerChannel) != 0;
    m.full_grid = (flags & kFlagFullGrid) != 0;
    m.low_bits = r.get<uint8_t>("low bits");
    for (int i = 0; i < 6; ++i) {
      if (r.get<uint8_t>("extension reserved") != 0) throw FormatError("payload: reserved extension byte is not zero");
    }
    m.high_tokens = r.get<int64_t>("high-token count");
  } else if (m.bits == 0) {
    // Validate the shape before trusting shape[0] as a length.
    CompressedMeta shape_only;
    shape_only.kind = CodecKind::kIndex;
    shape_only.dtype = at::kByte;
    shape_only.bits = 1;
    shape_only.shape = m.shape;
    shape_only.validate();
    const int64_t n = m.num_samples();
    const uint8_t* bits = r.take(size_t(n), "per-sample bits");
    m.sample_bits.assign(bits, bits + n);
  }
  m.validate();
  if (declared_payload != uint64_t(m.payload_bytes())) {
    throw FormatError(c10::str("payload: declares ", declared_payload, " payload bytes, the header implies ",
                               m.payload_bytes()));
  }
  const uint8_t* body = r.take(size_t(m.payload_bytes()), "payload bytes");
  const size_t covered = r.offset();
  const auto stored_crc = r.get<uint32_t>("checksum");
  if (r.offset() != size) {
    throw FormatError(c10::str("payload: ", size - r.offset(), " trailing bytes after a ", r.offset(),
                               "-byte payload"));
  }
  if (crc32c(data, covered) != stored_crc) throw FormatError("payload: checksum mismatch (corrupted data)");
  // The checksum only says the bytes are the ones written; a writer with a
  // bug (or a forger) can still send values no encoder produces.
  if (m.kind == CodecKind::kDirectQ) detail::check_directq_payload(m, body);
  if (m.kind == CodecKind::kTah) detail::check_tah_payload(m, body);

  at::Tensor payload = detail::allocate_payload(m, at::kCPU);
  if (m.payload_bytes() != 0) std::memcpy(payload.data_ptr<uint8_t>(), body, size_t(m.payload_bytes()));
  return CompressedTensor(std::move(m), device.is_cpu() ? payload : payload.to(device));
}

}  // namespace actkit
