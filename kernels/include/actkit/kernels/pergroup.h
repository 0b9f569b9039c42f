// Per-group quantization kernels: the argument blocks and the CPU entry
// points. The CUDA entry points taking the same blocks are in cuda.h.
//
// Stream layout (documented in docs/formats.md): the input is viewed as
// N samples x D values; sample n is split into ceil(D / G) groups of G
// contiguous values (the last one shorter). Group metadata is an array of
// (Z, R) uint16 pairs in group order. Codes form one LSB-first bit stream:
// sample n's D codes start at bit `sample_bit_offset(n)` and each code takes
// `bits(n)` bits, so the stream holds exactly sum_n D * bits(n) bits.
#pragma once

#include "actkit/kernels/common.h"
#include "actkit/kernels/counter_rng.h"

namespace actkit::kernels {

struct PerGroupLayout {
  int64_t num_samples = 0;  // N
  int64_t sample_size = 0;  // D
  int32_t group_size = 256; // G
  // Bits of every sample when nonzero; otherwise `sample_bits` and
  // `sample_bit_offset` (N entries each, in the kernel's memory space) give
  // per-sample bits and the bit offset of each sample's codes.
  int32_t uniform_bits = 0;
  const uint8_t* sample_bits = nullptr;
  const int64_t* sample_bit_offset = nullptr;

  ACTKIT_HD int64_t groups_per_sample() const { return (sample_size + group_size - 1) / group_size; }
  ACTKIT_HD int64_t num_groups() const { return num_samples * groups_per_sample(); }
  ACTKIT_HD int bits(int64_t n) const { return uniform_bits != 0 ? uniform_bits : sample_bits[n]; }
  ACTKIT_HD int64_t sample_bit_offset_of(int64_t n) const {
    return uniform_bits != 0 ? n * sample_size * uniform_bits : sample_bit_offset[n];
  }
};

struct PerGroupEncodeArgs {
  const void* input = nullptr;  // N * D contiguous values of `input_type`
  FloatType input_type = FloatType::kFloat32;
  PerGroupLayout layout;
  MetaFormat meta_format = MetaFormat::kBFloat16;
  RngKey key;
  // false: a group with NaN/Inf (or beyond the metadata format) fails the
  // encode. true: the group is stored with NaN metadata and decodes to NaN.
  bool propagate_nonfinite = false;
  uint16_t* meta = nullptr;  // 2 * num_groups entries
  uint8_t* codes = nullptr;  // ceil(total bits / 8) bytes, zero-filled by the caller
};

struct PerGroupDecodeArgs {
  const uint16_t* meta = nullptr;
  const uint8_t* codes = nullptr;
  PerGroupLayout layout;
  MetaFormat meta_format = MetaFormat::kBFloat16;
  void* output = nullptr;  // N * D contiguous values of `output_type`
  FloatType output_type = FloatType::kFloat32;
};

// Largest supported group size; kernels keep one group in local memory.
constexpr int32_t kMaxGroupSize = 4096;

// CPU kernels, parallel over groups with TBB. Encode returns kOk, or the
// first problem found (the outputs are then unspecified).
EncodeStatus pergroup_encode_cpu(const PerGroupEncodeArgs& args);
void pergroup_decode_cpu(const PerGroupDecodeArgs& args);

}  // namespace actkit::kernels
