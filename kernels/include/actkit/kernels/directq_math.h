// The scalar arithmetic of DirectQ (design §4.5; layout in docs/formats.md),
// shared verbatim by the CPU and CUDA kernels.
//
// With L = 2^(bits-1) - 1 levels on each side of zero and s = max |x| over
// the values sharing a scale:
//   encode  v = clamp(x * (L / s), -L, L),  q = round(v)  or  floor(v + U)
//   store   q + L, an unsigned code in [0, 2L]
//   decode  x' = q * (s / L)
// q = 0 decodes to exactly 0, so zeros (and sparse gradients) survive. The
// code 2^bits - 1 is never written; a decoder reads it as 2L.
#pragma once

#include "actkit/kernels/common.h"

namespace actkit::kernels {

ACTKIT_HD int32_t directq_levels(int bits) { return (1 << (bits - 1)) - 1; }

// |x| as bits: for non-negative floats the integer order is the float order,
// so scales are reduced with integer max, which every work split and atomic
// order agrees on; NaN and Inf land above 0x7f800000 - 1 and are caught.
ACTKIT_HD uint32_t abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }
ACTKIT_HD bool scale_is_finite(uint32_t abs_bits_value) { return abs_bits_value < 0x7f800000u; }

// L / s, the factor that maps [-s, s] onto [-L, L]; 0 for an all-zero scale
// group (every value then encodes as q = 0). A subnormal s would overflow
// the factor; the largest finite float keeps codes well defined.
ACTKIT_HD float directq_inv_step(float s, int32_t levels) {
  if (!(s > 0.0f)) return 0.0f;
  const float inv = div_rn(float(levels), s);
  const float kMaxFloat = 3.40282347e38f;
  return inv > kMaxFloat ? kMaxFloat : inv;
}

ACTKIT_HD float directq_step(float s, int32_t levels) { return div_rn(s, float(levels)); }

ACTKIT_HD float clamp_levels(float v, float top) {
  v = v < top ? v : top;
  return v > -top ? v : -top;
}

// Round-to-nearest-even of |v| < 2^22: adding and removing 1.5 * 2^23 leaves
// no fraction bits, and IEEE addition rounds ties to even. Unlike
// floor(v + 0.5) it never rounds a value just below one half up.
ACTKIT_HD float round_half_even(float v) {
  const float kMagic = 12582912.0f;
  return sub_rn(add_rn(v, kMagic), kMagic);
}

// Round-to-nearest code of x.
ACTKIT_HD uint8_t directq_code_nearest(float x, float inv_step, float top) {
  const float v = clamp_levels(mul_rn(x, inv_step), top);
  return uint8_t(int32_t(add_rn(round_half_even(v), top)));
}

// Stochastic code of x: floor(v + u) for u uniform in [0, 1), computed as
// "round up when u is below the fraction" so that v + u is never rounded
// (near v = L - 1, L - 1 + 0.99999994 would round to L, and 0 + u would
// round up to 1: a zero would not stay zero). E[q] = v exactly up to the
// rounding of v + L.
ACTKIT_HD uint8_t directq_code_stochastic(float x, float inv_step, float top, float u) {
  const float t = add_rn(clamp_levels(mul_rn(x, inv_step), top), top);  // in [0, 2L]
  const float whole = float(int32_t(t));                                  // t >= 0: truncation is floor
  return uint8_t(int32_t(whole) + (u < sub_rn(t, whole) ? 1 : 0));
}

ACTKIT_HD float directq_value(uint32_t code, float step, int32_t levels) {
  const int32_t top = 2 * levels;
  const int32_t c = int32_t(code) < top ? int32_t(code) : top;
  return mul_rn(float(c - levels), step);
}

}  // namespace actkit::kernels
