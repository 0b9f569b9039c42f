// The scalar arithmetic of DirectQ (design §4.5; layout in docs/formats.md),
// shared verbatim by the CPU and CUDA kernels.
//
// Two grids over [-s, s], s = max |x| over the values sharing a scale. With
// h the grid's half-width in steps (below):
//   encode  v = clamp(x * (h / s), -h, h), code = round(v + h) or floor(v + h + U)
//   decode  x' = (code - h) * (s / h)
// * symmetric (the default): h = L = 2^(bits-1) - 1, codes 0..2L, 2^bits - 1
//   levels. q = code - L = 0 decodes to exactly 0, so zeros (and sparse
//   gradients) survive. The code 2^bits - 1 is never written; a decoder
//   reads it as 2L. Round-to-nearest rounds v itself (round(v) + L), which
//   for an integer h is the same code with one rounding fewer.
// * full: h = (2^bits - 1) / 2, codes 0..2^bits - 1, every code a level
//   (the papers' "2^b levels", 4 at 2 bits where symmetric has 3); zero sits
//   between two levels, so it is not exact, and round-to-nearest is biased
//   there while stochastic rounding stays unbiased.
#pragma once

#include "actkit/kernels/common.h"

namespace actkit::kernels {

ACTKIT_HD int32_t directq_levels(int bits) { return (1 << (bits - 1)) - 1; }

// h of the grid: L, or (2^bits - 1) / 2 (exact in fp32).
ACTKIT_HD float directq_half(int bits, DirectQGrid grid) {
  return grid == DirectQGrid::kFull ? 0.5f * float((1 << bits) - 1) : float(directq_levels(bits));
}

// The largest code a decoder accepts: 2L, or 2^bits - 1.
ACTKIT_HD int32_t directq_top_code(int bits, DirectQGrid grid) {
  return grid == DirectQGrid::kFull ? (1 << bits) - 1 : 2 * directq_levels(bits);
}

// |x| as bits: for non-negative floats the integer order is the float order,
// so scales are reduced with integer max, which every work split and atomic
// order agrees on; NaN and Inf land above 0x7f800000 - 1 and are caught.
ACTKIT_HD uint32_t abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }
ACTKIT_HD bool scale_is_finite(uint32_t abs_bits_value) { return abs_bits_value < 0x7f800000u; }

// h / s, the factor that maps [-s, s] onto [-h, h]; 0 for an all-zero scale
// group (every value then encodes as v = 0). A subnormal s would overflow
// the factor; the largest finite float keeps codes well defined.
ACTKIT_HD float directq_inv_step(float s, float half) {
  if (!(s > 0.0f)) return 0.0f;
  const float inv = div_rn(half, s);
  const float kMaxFloat = 3.40282347e38f;
  return inv > kMaxFloat ? kMaxFloat : inv;
}

ACTKIT_HD float directq_step(float s, float half) { return div_rn(s, half); }

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

// Round-to-nearest code of x on the symmetric grid (top = L).
ACTKIT_HD uint8_t directq_code_nearest(float x, float inv_step, float top) {
  const float v = clamp_levels(mul_rn(x, inv_step), top);
  return uint8_t(int32_t(add_rn(round_half_even(v), top)));
}

// Round-to-nearest code of x on the full grid (half = (2^bits - 1) / 2):
// v + h is in [0, 2^bits - 1], so the rounded code is too.
ACTKIT_HD uint8_t directq_code_nearest_full(float x, float inv_step, float half) {
  const float v = clamp_levels(mul_rn(x, inv_step), half);
  return uint8_t(int32_t(round_half_even(add_rn(v, half))));
}

// Stochastic code of x on either grid (top = h): floor(v + h + u) for u
// uniform in [0, 1), computed as "round up when u is below the fraction" so
// that v + u is never rounded (near v = L - 1, L - 1 + 0.99999994 would
// round to L, and 0 + u would round up to 1: a zero would not stay zero).
// E[code - h] = v exactly up to the rounding of v + h.
ACTKIT_HD uint8_t directq_code_stochastic(float x, float inv_step, float top, float u) {
  const float t = add_rn(clamp_levels(mul_rn(x, inv_step), top), top);  // in [0, 2L]
  const float whole = float(int32_t(t));                                  // t >= 0: truncation is floor
  return uint8_t(int32_t(whole) + (u < sub_rn(t, whole) ? 1 : 0));
}

// (code - h) * step, the code first clamped to top_code. For the symmetric
// grid code - h is an exact integer, as (code - L) was.
ACTKIT_HD float directq_value(uint32_t code, float step, float half, int32_t top_code) {
  const int32_t c = int32_t(code) < top_code ? int32_t(code) : top_code;
  return mul_rn(sub_rn(float(c), half), step);
}

}  // namespace actkit::kernels
