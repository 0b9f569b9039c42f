// The scalar arithmetic of per-group stochastic quantization (ActNN §4.1; layout in docs/formats.md),
// shared verbatim by the CPU and CUDA kernels.
//
// For a group with minimum m and maximum M, the stored zero point Z is m
// rounded toward -inf and the stored range R is (M - Z) rounded toward +inf,
// both in the 16-bit metadata format, so [Z, Z + R] contains the group. With
// B = 2^bits - 1:
//   encode  q = clamp(floor((x - Z) * (B / R) + U), 0, B),  U ~ Uniform[0, 1)
//   decode  x' = q * (R / B) + Z
// which is unbiased: E[x'] = x up to float rounding. R == 0 encodes every
// value as 0 and decodes it to Z exactly.
#pragma once

#include <cmath>  // std::isfinite

#include "actkit/kernels/half.h"

namespace actkit::kernels {

struct GroupMeta {
  uint16_t zero_bits = 0;   // Z in the metadata format
  uint16_t range_bits = 0;  // R in the metadata format
  float zero = 0.0f;        // Z as float
  float scale = 0.0f;       // B / R (0 when R == 0)
};

ACTKIT_HD uint32_t max_code(int bits) { return (1u << bits) - 1u; }

// Computes the stored metadata of a group from its finite min and max.
// Returns false when Z or R overflow the metadata format.
ACTKIT_HD bool make_group_meta(float mn, float mx, int bits, MetaFormat fmt, GroupMeta* out) {
  // Reductions may pick either of -0 and +0 depending on order; adding +0
  // makes both +0 so every work split stores the same bits.
  mn = add_rn(mn, 0.0f);
  mx = add_rn(mx, 0.0f);
  out->zero_bits = float_to_meta_directed(mn, fmt, /*up=*/false);
  out->zero = meta_to_float(out->zero_bits, fmt);
  const float diff = sub_rn(mx, out->zero);
  out->range_bits = float_to_meta_directed(diff, fmt, /*up=*/true);
  const float range = meta_to_float(out->range_bits, fmt);
  if (!(std::isfinite(out->zero) && std::isfinite(range))) return false;
  out->scale = range > 0.0f ? div_rn(float(max_code(bits)), range) : 0.0f;
  // B / R overflows for a subnormal range; a finite scale keeps every code
  // well defined (such a group is zero to within 1e-38 anyway).
  const float kMaxFloat = 3.40282347e38f;
  out->scale = out->scale > kMaxFloat ? kMaxFloat : out->scale;
  return true;
}

// floor((x - Z) * scale + u) clamped to `top` (= B). x >= Z holds for every
// value of the group (Z is its minimum rounded down), so the sum is >= 0 and
// truncation toward zero is the floor; clamping in float first keeps the
// integer conversion in range.
ACTKIT_HD uint8_t quantize_value(float x, float zero, float scale, float u, float top) {
  float v = add_rn(mul_rn(sub_rn(x, zero), scale), u);
  v = v < top ? v : top;
  return uint8_t(int32_t(v));
}

// Step between adjacent levels, R / B.
ACTKIT_HD float dequant_step(uint16_t range_bits, int bits, MetaFormat fmt) {
  return div_rn(meta_to_float(range_bits, fmt), float(max_code(bits)));
}

ACTKIT_HD float dequantize_value(uint32_t code, float step, float zero) {
  return add_rn(mul_rn(float(code), step), zero);
}

}  // namespace actkit::kernels
