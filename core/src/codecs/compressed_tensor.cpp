#include "actkit/core/compressed_tensor.h"
#include "actkit/core/saved_activation.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <numeric>

#include "actkit/core/errors.h"
#include "actkit/kernels/tah.h"
#include "dispatch.h"

namespace actkit {
namespace {

// Bounds that keep every size computation (numel * 8 bits) inside int64.
constexpr size_t kMaxRank = 16;
constexpr int64_t kMaxNumel = int64_t(1) << 50;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_float_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }
bool is_index_dtype(at::ScalarType t) { return t == at::kByte || t == at::kInt || t == at::kLong; }

}  // namespace

const char* to_string(CodecKind kind) {
  switch (kind) {
    case CodecKind::kPerGroup: return "per-group";
    case CodecKind::kMask: return "mask";
    case CodecKind::kIndex: return "index";
    case CodecKind::kDirectQ: return "directq";
    case CodecKind::kTah: return "tah";
    case CodecKind::kRaw: return "raw";
  }
  return "unknown";
}

int64_t CompressedMeta::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
}

int64_t CompressedMeta::num_samples() const { return shape.size() >= 2 ? shape[0] : 1; }

int64_t CompressedMeta::sample_size() const {
  const int64_t n = num_samples();
  return n == 0 ? 0 : numel() / n;
}

int64_t CompressedMeta::num_groups() const {
  if (kind != CodecKind::kPerGroup) return 0;
  return num_samples() * ceil_div(sample_size(), group_size);
}

int64_t CompressedMeta::num_scales() const {
  if (kind != CodecKind::kDirectQ) return 0;
  return per_channel ? shape.back() : 1;
}

int64_t CompressedMeta::num_tokens() const {
  if (shape.empty() || shape.back() == 0) return 0;
  return numel() / shape.back();
}

kernels::TahLayout detail::tah_layout(const CompressedMeta& m) {
  kernels::TahLayout L;
  L.num_tokens = m.num_tokens();
  L.channels = m.shape.empty() ? 0 : m.shape.back();
  L.group_size = m.group_size;
  L.high_bits = m.bits;
  L.low_bits = m.low_bits;
  L.high_tokens = m.high_tokens;
  return L;
}

int64_t CompressedMeta::meta_bytes() const {
  switch (kind) {
    case CodecKind::kDirectQ: return 4 * num_scales();
    case CodecKind::kTah: return detail::tah_layout(*this).codes_offset();
    case CodecKind::kRaw: return 0;
    default: return 4 * num_groups();
  }
}

int64_t CompressedMeta::code_bytes() const {
  if (kind == CodecKind::kTah) return detail::tah_layout(*this).code_bytes();
  if (kind == CodecKind::kRaw) return numel() * int64_t(c10::elementSize(dtype));
  if (kind == CodecKind::kPerGroup && bits == 0) {
    int64_t total_bits = 0;
    for (uint8_t b : sample_bits) total_bits += b;
    return ceil_div(total_bits * sample_size(), 8);
  }
  return ceil_div(numel() * bits, 8);
}

std::vector<int64_t> CompressedMeta::sample_bit_offsets() const {
  std::vector<int64_t> offsets(sample_bits.size());
  int64_t pos = 0;
  for (size_t n = 0; n < sample_bits.size(); ++n) {
    offsets[n] = pos;
    pos += int64_t(sample_bits[n]) * sample_size();
  }
  return offsets;
}

void CompressedMeta::validate() const {
  if (shape.size() > kMaxRank) throw FormatError(c10::str("rank ", shape.size(), " exceeds ", kMaxRank));
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) throw FormatError(c10::str("negative dimension ", d));
    if (d != 0 && count > kMaxNumel / d) throw FormatError("tensor too large (more than 2^50 values)");
    count *= d;
  }
  auto check_bits = [](int b) {
    if (b < 1 || b > 8) throw FormatError(c10::str("bits must be in 1..8, got ", b));
  };
  switch (kind) {
    case CodecKind::kPerGroup:
      if (!is_float_dtype(dtype)) throw FormatError(c10::str("per-group payload of non-float dtype ", dtype));
      if (shape.empty()) throw FormatError("per-group payload needs rank >= 1");
      if (group_size < 8 || group_size > kernels::kMaxGroupSize || group_size % 8 != 0) {
        throw FormatError(c10::str("group size must be a multiple of 8 in [8, ", kernels::kMaxGroupSize,
                                   "], got ", group_size));
      }
      if (meta_format != MetaFormat::kBFloat16 && meta_format != MetaFormat::kFloat16) {
        throw FormatError("unknown metadata format");
      }
      if (sample_bits.empty()) {
        check_bits(bits);
      } else {
        if (bits != 0) throw FormatError("bits must be 0 when per-sample bits are given");
        if (int64_t(sample_bits.size()) != num_samples()) {
          throw FormatError(c10::str("per-sample bits: ", sample_bits.size(), " entries for ", num_samples(),
                                     " samples"));
        }
        for (uint8_t b : sample_bits) check_bits(b);
      }
      check_no_boundary_fields();
      return;
    case CodecKind::kMask:
      if (dtype != at::kBool) throw FormatError(c10::str("mask payload of dtype ", dtype));
      if (bits != 1) throw FormatError(c10::str("mask payload with ", bits, " bits"));
      break;
    case CodecKind::kIndex:
      if (!is_index_dtype(dtype)) throw FormatError(c10::str("index payload of dtype ", dtype));
      check_bits(bits);
      break;
    case CodecKind::kDirectQ: validate_directq(); return;
    case CodecKind::kTah: validate_tah(); return;
    case CodecKind::kRaw:
      if (!is_float_dtype(dtype)) throw FormatError(c10::str("raw payload of non-float dtype ", dtype));
      if (bits != 8 * int(c10::elementSize(dtype))) {
        throw FormatError(c10::str("raw ", dtype, " payload with ", bits, " bits per value"));
      }
      break;
    default: throw FormatError(c10::str("unknown codec kind ", int(kind)));
  }
  if (!sample_bits.empty() || group_size != 0 || meta_format != MetaFormat::kBFloat16) {
    throw FormatError(c10::str(to_string(kind), " payload cannot have per-sample bits, groups or group metadata"));
  }
  check_no_boundary_fields();
}

void CompressedMeta::check_no_boundary_fields() const {
  if (per_channel || full_grid || low_bits != 0 || high_tokens != 0) {
    throw FormatError(
        c10::str(to_string(kind), " payload cannot have per-channel scales, a full grid, low bits or high tokens"));
  }
}

void CompressedMeta::validate_directq() const {
  if (!is_float_dtype(dtype)) throw FormatError(c10::str("directq payload of non-float dtype ", dtype));
  if (numel() == 0) throw FormatError("directq payload of an empty tensor");
  if (bits < 2 || bits > 8) throw FormatError(c10::str("directq bits must be in 2..8, got ", bits));
  if (per_channel && shape.empty()) throw FormatError("directq per-channel scales need rank >= 1");
  if (!sample_bits.empty() || group_size != 0 || meta_format != MetaFormat::kBFloat16 || low_bits != 0 ||
      high_tokens != 0) {
    throw FormatError("directq payload cannot have per-sample bits, groups, group metadata, low bits or high tokens");
  }
}

void CompressedMeta::validate_tah() const {
  if (!is_float_dtype(dtype)) throw FormatError(c10::str("tah payload of non-float dtype ", dtype));
  if (shape.empty() || numel() == 0) throw FormatError("tah payload needs a non-empty tensor of rank >= 1");
  if (group_size < 8 || group_size > kernels::kTahMaxGroupSize || (group_size & (group_size - 1)) != 0) {
    throw FormatError(c10::str("tah tile size must be a power of two in [8, ", kernels::kTahMaxGroupSize,
                               "], got ", group_size));
  }
  if (shape.back() % group_size != 0) {
    throw FormatError(c10::str("tah channels (last dimension ", shape.back(), ") are not a multiple of the tile size ",
                               group_size));
  }
  if (bits < 1 || bits > 8 || low_bits < 1 || low_bits > bits) {
    throw FormatError(c10::str("tah bits must satisfy 1 <= low <= high <= 8, got low ", low_bits, ", high ", bits));
  }
  if (high_tokens < 0 || high_tokens > num_tokens()) {
    throw FormatError(c10::str("tah high-token count ", high_tokens, " outside [0, ", num_tokens(), "]"));
  }
  if (meta_format != MetaFormat::kFloat16) throw FormatError("tah tile parameters must be fp16");
  if (!sample_bits.empty() || per_channel || full_grid) {
    throw FormatError("tah payload cannot have per-sample bits, scales or a full grid");
  }
}

CompressedTensor::CompressedTensor(CompressedMeta meta, at::Tensor payload)
    : meta_(std::move(meta)), payload_(std::move(payload)) {
  meta_.validate();
  if (!payload_.defined() || payload_.scalar_type() != at::kByte || payload_.dim() != 1 ||
      !payload_.is_contiguous()) {
    throw FormatError("payload must be a contiguous 1-D uint8 tensor");
  }
  if (payload_.numel() < meta_.payload_bytes()) {
    throw FormatError(c10::str("payload holds ", payload_.numel(), " bytes, ", meta_.payload_bytes(), " needed"));
  }
  // Kernels read the metadata as uint16 pairs and OR 32-bit words.
  if (reinterpret_cast<uintptr_t>(payload_.data_ptr()) % detail::kPayloadPad != 0 ||
      payload_.numel() % detail::kPayloadPad != 0) {
    at::Tensor aligned = detail::allocate_payload(meta_, payload_.device());
    aligned.narrow(0, 0, meta_.payload_bytes()).copy_(payload_.narrow(0, 0, meta_.payload_bytes()));
    payload_ = aligned;
  }
}

at::Device CompressedTensor::device() const { return payload_.defined() ? payload_.device() : at::kCPU; }

double CompressedTensor::average_bits() const {
  if (meta_.kind == CodecKind::kTah) {
    const int64_t t = meta_.num_tokens();
    return t == 0 ? meta_.bits
                  : (double(meta_.high_tokens) * meta_.bits + double(t - meta_.high_tokens) * meta_.low_bits) /
                        double(t);
  }
  const int64_t n = numel();
  if (n == 0) return meta_.bits;
  if (meta_.bits != 0) return meta_.bits;
  int64_t total = 0;
  for (uint8_t b : meta_.sample_bits) total += b;
  return double(total) / double(meta_.sample_bits.size());
}

at::Tensor CompressedTensor::decode() const {
  if (!defined()) throw InvalidInput("decode: the CompressedTensor is empty");
  at::Tensor out = at::empty(meta_.shape, at::TensorOptions().dtype(meta_.dtype).device(device()));
  decode_into(out);
  return out;
}

void CompressedTensor::decode_into(at::Tensor& out) const {
  if (!defined()) throw InvalidInput("decode: the CompressedTensor is empty");
  if (!out.defined() || out.scalar_type() != meta_.dtype || out.sizes() != c10::IntArrayRef(meta_.shape) ||
      out.device() != device() || !out.is_contiguous()) {
    throw InvalidInput(c10::str("decode_into: needs a contiguous ", meta_.dtype, " tensor of shape ",
                                c10::IntArrayRef(meta_.shape), " on ", device()));
  }
  decode_range(0, meta_.num_samples(), out);
}

at::Tensor CompressedTensor::decode_samples(int64_t begin, int64_t end) const {
  if (!defined()) throw InvalidInput("decode_samples: the CompressedTensor is empty");
  if (meta_.shape.size() < 2 || begin < 0 || end > meta_.shape[0] || begin >= end) {
    throw InvalidInput(c10::str("decode_samples: needs 0 <= begin < end <= shape[0] on a tensor of rank >= 2, got [",
                                begin, ", ", end, ") of shape ", c10::IntArrayRef(meta_.shape)));
  }
  std::vector<int64_t> shape = meta_.shape;
  shape[0] = end - begin;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(meta_.dtype).device(device()));
  decode_range(begin, end, out);
  return out;
}

void CompressedTensor::decode_range(int64_t begin, int64_t end, at::Tensor& out) const {
  switch (meta_.kind) {
    case CodecKind::kPerGroup: detail::decode_per_group(*this, begin, end, out); return;
    case CodecKind::kMask:
    case CodecKind::kIndex: detail::decode_bitfield(*this, begin, end, out); return;
    case CodecKind::kRaw: {
      const int64_t row = meta_.numel() / std::max<int64_t>(meta_.num_samples(), 1);
      const at::Tensor values = payload_.narrow(0, 0, meta_.payload_bytes()).view(meta_.dtype);
      out.view(-1).copy_(values.narrow(0, begin * row, (end - begin) * row));
      return;
    }
    case CodecKind::kDirectQ:
    case CodecKind::kTah: {
      // Boundary payloads decode whole; a range of samples is cut from that.
      const auto decode_all = meta_.kind == CodecKind::kTah ? detail::decode_tah : detail::decode_directq;
      if (begin == 0 && end == meta_.num_samples()) {
        decode_all(*this, out);
        return;
      }
      at::Tensor all = at::empty(meta_.shape, out.options());
      decode_all(*this, all);
      out.copy_(all.narrow(0, begin, end - begin));
      return;
    }
  }
  throw InvalidInput("decode: unknown codec kind");
}

CompressedTensor CompressedTensor::to(at::Device device) const {
  if (!defined()) throw InvalidInput("to: the CompressedTensor is empty");
  return CompressedTensor(meta_, payload_.to(device));
}

}  // namespace actkit

namespace actkit {

CompressedTensor SavedActivation::load() const {
  if (swapped_) return swapped_->load();
  if (!in_memory_.defined()) throw InvalidInput("load of an empty saved activation");
  return in_memory_;
}

int64_t SavedActivation::byte_size() const { return swapped_ ? swapped_->byte_size() : in_memory_.byte_size(); }

}  // namespace actkit
