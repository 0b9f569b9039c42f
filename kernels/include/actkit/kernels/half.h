// Conversions between float and the two 16-bit float formats (IEEE binary16
// and bfloat16), written on bits so that host and device agree exactly and no
// CUDA or ATen header is needed.
//
// Round-to-nearest-even is used for values (decode output); directed rounding
// (toward -inf / +inf) is used for the per-group zero point and range, so the
// stored interval always contains the group's values (see pergroup_math.h).
#pragma once

#include "actkit/kernels/common.h"

namespace actkit::kernels {

ACTKIT_HD float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

ACTKIT_HD float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24 is exact in float.
    return bits_float(sign | float_bits(float(man) * 5.9604644775390625e-8f));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

ACTKIT_HD uint16_t float_to_bf16_rne(float f) {
  const uint32_t b = float_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40u);  // quiet NaN
  return uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

ACTKIT_HD uint16_t float_to_fp16_rne(float f) {
  const uint32_t b = float_bits(f);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to +-Inf
  if (a < 0x38800000u) {
    // Result is subnormal: adding 0.5 puts the 2^-24 unit in the low mantissa
    // bits and lets the FPU do the round-to-nearest-even.
    const float t = add_rn(bits_float(a), 0.5f);
    return uint16_t(sign | (float_bits(t) - 0x3f000000u));
  }
  const uint32_t odd = (a >> 13) & 1u;
  a += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round
  return uint16_t(sign | (a >> 13));
}

// Truncation toward zero; finite inputs beyond the format saturate at the
// largest finite value.
ACTKIT_HD uint16_t float_to_fp16_rtz(float f) {
  const uint32_t b = float_bits(f);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t a = b & 0x7fffffffu;
  if (a >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  const int32_t e = int32_t(a >> 23) - 112;
  if (e >= 31) return uint16_t(sign | 0x7bffu);
  if (e <= 0) {
    if (e < -10) return sign;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return uint16_t(sign | (m >> (14 - e)));
  }
  return uint16_t(sign | (uint32_t(e) << 10) | ((a >> 13) & 0x3ffu));
}

ACTKIT_HD float meta_to_float(uint16_t h, MetaFormat fmt) {
  return fmt == MetaFormat::kBFloat16 ? bf16_to_float(h) : fp16_to_float(h);
}

// A quiet NaN in the metadata format: a group stored with NaN metadata
// decodes to NaN (the "propagate" policy for non-finite input).
ACTKIT_HD uint16_t meta_nan(MetaFormat fmt) { return fmt == MetaFormat::kBFloat16 ? 0x7fc0 : 0x7e00; }

// Rounds a finite float to the 16-bit format, toward +inf when `up`, toward
// -inf otherwise. Values beyond the format's range become +-Inf, which the
// caller treats as an overflow.
ACTKIT_HD uint16_t float_to_meta_directed(float f, MetaFormat fmt, bool up) {
  uint16_t h;
  if (fmt == MetaFormat::kBFloat16) {
    h = uint16_t(float_bits(f) >> 16);
  } else {
    h = float_to_fp16_rtz(f);
  }
  const float back = meta_to_float(h, fmt);
  // Truncation moved the value toward zero; step one unit away from zero when
  // that went the wrong way for the requested direction.
  if (back != f && (up ? f > 0.0f : f < 0.0f)) h = uint16_t(h + 1u);
  return h;
}

}  // namespace actkit::kernels
