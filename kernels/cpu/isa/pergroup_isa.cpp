// Per-group quantization over a range of groups, one group at a time in
// local buffers so every inner loop is a simple vectorizable pass.
#include <cstdint>
#include <limits>

#include "actkit/kernels/pergroup_math.h"
#include "bitpack.h"
#include "float_io.h"
#include "isa_functions.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

using cpu::Bf16In;
using cpu::Fp16In;

// Encodes one group; returns kOk or the problem found.
ACTKIT_CPU_INLINE EncodeStatus encode_group(const float* x, int64_t len, int bits, const PerGroupEncodeArgs& a,
                                            uint64_t first_index, uint16_t* meta, int64_t bit_pos,
                                            uint8_t* scratch) {
  const MetaFormat fmt = a.meta_format;
  float mn = std::numeric_limits<float>::infinity();
  float mx = -std::numeric_limits<float>::infinity();
  float poison = 0.0f;  // becomes NaN if any value is NaN or +-Inf
  // Selects on values, not std::min/max (which return references and keep
  // the loop scalar).
#pragma omp simd reduction(min : mn) reduction(max : mx) reduction(+ : poison)
  for (int64_t j = 0; j < len; ++j) {
    const float v = x[j];
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    poison += v * 0.0f;
  }
  GroupMeta gm;
  EncodeStatus problem = EncodeStatus::kOk;
  if (!(poison == 0.0f)) {
    problem = EncodeStatus::kNonFinite;
  } else if (!make_group_meta(mn, mx, bits, fmt, &gm)) {
    problem = EncodeStatus::kMetaOverflow;
  }
  if (problem != EncodeStatus::kOk) {
    if (!a.propagate_nonfinite) return problem;
    meta[0] = meta[1] = meta_nan(fmt);  // codes stay zero
    return EncodeStatus::kOk;
  }
  meta[0] = gm.zero_bits;
  meta[1] = gm.range_bits;

  const float top = float(max_code(bits));
  const float zero = gm.zero;
  const float scale = gm.scale;
  // Split the 64-bit element index once; the low word may wrap inside a group.
  const uint32_t lo0 = uint32_t(first_index);
  const uint32_t hi0 = uint32_t(first_index >> 32);
  const RngKey key = a.key;  // a local copy: stores to scratch cannot alias it
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t lo = lo0 + uint32_t(j);
    const uint32_t hi = hi0 + (lo < lo0 ? 1u : 0u);
    scratch[j] = quantize_value(x[j], zero, scale, counter_uniform(key, lo, hi), top);
  }
  cpu::pack_codes(scratch, len, bits, a.codes, bit_pos);
  return EncodeStatus::kOk;
}

template <typename In>
EncodeStatus encode_groups(const PerGroupEncodeArgs& a, int64_t g0, int64_t g1) {
  const PerGroupLayout& L = a.layout;
  const int64_t gps = L.groups_per_sample();
  const In* input = static_cast<const In*>(a.input);
  alignas(64) float xbuf[kMaxGroupSize];
  alignas(64) uint8_t codes[kMaxGroupSize];
  for (int64_t g = g0; g != g1; ++g) {
    const int64_t n = g / gps;
    const int64_t start = (g - n * gps) * L.group_size;
    const int64_t left = L.sample_size - start;
    const int64_t len = left < L.group_size ? left : L.group_size;
    const int bits = L.bits(n);
    const int64_t elem = n * L.sample_size + start;
    const float* x = cpu::load_floats(input, elem, len, xbuf);
    const int64_t bit_pos = L.sample_bit_offset_of(n) + start * bits;
    const EncodeStatus s = encode_group(x, len, bits, a, uint64_t(elem), a.meta + 2 * g, bit_pos, codes);
    if (s != EncodeStatus::kOk) return s;
  }
  return EncodeStatus::kOk;
}

template <typename Out>
void decode_groups(const PerGroupDecodeArgs& a, int64_t g0, int64_t g1) {
  const PerGroupLayout& L = a.layout;
  const int64_t gps = L.groups_per_sample();
  Out* output = static_cast<Out*>(a.output);
  alignas(64) uint8_t codes[kMaxGroupSize];
  alignas(64) float ybuf[kMaxGroupSize];
  for (int64_t g = g0; g != g1; ++g) {
    const int64_t n = g / gps;
    const int64_t start = (g - n * gps) * L.group_size;
    const int64_t left = L.sample_size - start;
    const int64_t len = left < L.group_size ? left : L.group_size;
    const int bits = L.bits(n);
    const int64_t elem = n * L.sample_size + start;
    cpu::unpack_codes(a.codes, L.sample_bit_offset_of(n) + start * bits, len, bits, codes);
    const float zero = meta_to_float(a.meta[2 * g], a.meta_format);
    const float step = dequant_step(a.meta[2 * g + 1], bits, a.meta_format);
    float* y = cpu::is_float_v<Out> ? reinterpret_cast<float*>(output + elem) : ybuf;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) y[j] = dequantize_value(codes[j], step, zero);
    if constexpr (!cpu::is_float_v<Out>) cpu::from_float(ybuf, len, output + elem);
  }
}

}  // namespace

EncodeStatus pergroup_encode(const PerGroupEncodeArgs& a, int64_t g0, int64_t g1) {
  switch (a.input_type) {
    case FloatType::kFloat32: return encode_groups<float>(a, g0, g1);
    case FloatType::kFloat16: return encode_groups<Fp16In>(a, g0, g1);
    case FloatType::kBFloat16: return encode_groups<Bf16In>(a, g0, g1);
  }
  return EncodeStatus::kOk;
}

void pergroup_decode(const PerGroupDecodeArgs& a, int64_t g0, int64_t g1) {
  switch (a.output_type) {
    case FloatType::kFloat32: decode_groups<float>(a, g0, g1); break;
    case FloatType::kFloat16: decode_groups<Fp16In>(a, g0, g1); break;
    case FloatType::kBFloat16: decode_groups<Bf16In>(a, g0, g1); break;
  }
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
