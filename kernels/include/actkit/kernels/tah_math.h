// The scalar arithmetic of TAH-Quant (TAH-Quant §3; layout in tah.h and
// docs/formats.md), shared verbatim by the CPU and CUDA kernels. Every
// operation that rounds goes through the _rn helpers in a fixed order, so
// both produce the same entropies, tile parameters and codes.
#pragma once

#include <cmath>  // std::isfinite
#include <cstring>  // std::memcpy

#include "actkit/kernels/half.h"

namespace actkit::kernels {

// The small constants of TAH-Quant §3.2-3.3: epsilon in p_k = |a_k| /
// (||a||_1 + epsilon), varsigma in log(p_k + varsigma), rho in the outlier
// ratio |a(1)| / (|a(2)| + rho).
constexpr float kTahEpsilon = 1e-12f;
constexpr float kTahVarsigma = 1e-12f;
constexpr float kTahRho = 1e-12f;

// Token sums (the L1 norm and the entropy) are formed in a fixed order that
// a CUDA warp follows naturally: lane l adds channels l, l + 32, l + 64, ...
// in turn, then the 32 partial sums are combined by the butterfly of
// tah_lane_total. The CPU keeps the same 32 partial sums.
constexpr int kTahLanes = 32;

ACTKIT_HD float abs_rn(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }

// Combines 32 partial sums as a warp's xor-shuffle butterfly does (after
// the step at distance d, lanes l and l ^ d both hold acc[l] + acc[l ^ d]);
// the sum lands in acc[0]. Host-side twin of the CUDA reduction.
ACTKIT_CPU_INLINE float tah_lane_total(float* acc) {
  for (int d = kTahLanes / 2; d > 0; d /= 2) {
    for (int l = 0; l < d; ++l) acc[l] = add_rn(acc[l], acc[l + d]);
  }
  return acc[0];
}

// Natural logarithm of a positive normal float to about 1e-7 relative,
// from its bits and a short odd series: x = 2^e * m with m in
// [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with s = (m - 1) / (m + 1).
// The CPU and CUDA libraries' logf differ in the last bit; this one is the
// same everywhere, and that is what keeps token rankings identical.
ACTKIT_HD float tah_log(float x) {
  const uint32_t b = float_bits(x);
  int32_t e = int32_t(b >> 23) - 127;
  uint32_t mb = (b & 0x007fffffu) | 0x3f800000u;  // m in [1, 2)
  const bool high = mb > 0x3fb504f3u;              // m > sqrt(2)
  mb = high ? mb - 0x00800000u : mb;
  e = high ? e + 1 : e;
  const float m = bits_float(mb);
  const float s = div_rn(sub_rn(m, 1.0f), add_rn(m, 1.0f));
  const float z = mul_rn(s, s);
  // 2s (1 + z/3 + z^2/5 + z^3/7 + z^4/9); |s| <= 0.172, so the next term is
  // below 3e-9 of the sum.
  float p = 0.111111111f;
  p = add_rn(0.142857143f, mul_rn(z, p));
  p = add_rn(0.2f, mul_rn(z, p));
  p = add_rn(0.333333333f, mul_rn(z, p));
  const float two_s = add_rn(s, s);
  const float log_m = add_rn(two_s, mul_rn(two_s, mul_rn(z, p)));
  return add_rn(mul_rn(float(e), 0.693147181f), log_m);
}

// One channel's entropy term p log(p + varsigma), p = |a| * inv_l1.
ACTKIT_HD float tah_entropy_term(float a, float inv_l1) {
  const float p = mul_rn(abs_rn(a), inv_l1);
  return mul_rn(p, tah_log(add_rn(p, kTahVarsigma)));
}

ACTKIT_HD float tah_inv_l1(float l1) { return div_rn(1.0f, add_rn(l1, kTahEpsilon)); }

// -sum as the entropy; 0 - sum rather than negation so that an empty sum
// (-0 from 0 * log terms) gives +0 and sorts like every other zero.
ACTKIT_HD float tah_entropy_from_sum(float sum) { return sub_rn(0.0f, sum); }

// 1 / sqrt(G) for the tile sizes TAH accepts (8..256), as float literals:
// the same value on every compiler.
ACTKIT_HD float tah_hadamard_norm(int g) {
  switch (g) {
    case 8: return 0.353553390593273762f;
    case 16: return 0.25f;
    case 32: return 0.176776695296636881f;
    case 64: return 0.125f;
    case 128: return 0.0883883476483184406f;
    default: return 0.0625f;  // 256
  }
}

// One butterfly of the fast Walsh-Hadamard transform: (a, b) -> (a + b, a - b).
ACTKIT_HD void tah_butterfly(float* y, int64_t i, int64_t j) {
  const float a = y[i];
  const float b = y[j];
  y[i] = add_rn(a, b);
  y[j] = sub_rn(a, b);
}

// Index of the first element of butterfly `p` (0 <= p < G/2) in the stage
// of half-width h (a power of two below G); its partner is at + h.
ACTKIT_HD int64_t tah_butterfly_index(int64_t p, int64_t h) { return (p / h) * 2 * h + (p % h); }

// The normalized transform y <- H_G y / sqrt(G) in place (Sylvester order).
// H_G / sqrt(G) is orthogonal and symmetric, so applying this twice gives y
// back (up to float rounding). The CUDA kernels run the same butterflies,
// a warp's lanes sharing each stage.
ACTKIT_CPU_INLINE void tah_hadamard(float* y, int g) {
  for (int64_t h = 1; h < g; h *= 2) {
    for (int64_t p = 0; p < g / 2; ++p) tah_butterfly(y, tah_butterfly_index(p, h), tah_butterfly_index(p, h) + h);
  }
  const float norm = tah_hadamard_norm(g);
  for (int64_t k = 0; k < g; ++k) y[k] = mul_rn(y[k], norm);
}

#if !defined(__CUDACC__)  // host code of the CPU kernels and tests only
// tah_hadamard for a tile size fixed at compile time, for the CPU kernels:
// the same butterflies in the same stage order, so the same bits, with the
// tile held in vectors of W = min(G, the register width) floats. A stage of half-width
// h < W stays inside each vector: element k takes v[k ^ h] + v[k] where bit
// h of k is clear and v[k ^ h] - v[k] where it is set (one lane shuffle, a
// sign flip and an add); a stage of h >= W pairs whole vectors.
namespace tah_detail {

// The floats of the widest vector register the build targets: wider vectors
// than the hardware has are emulated, and their lane shuffles cost tenfold.
#if defined(__AVX512F__)
constexpr int kTahVectorFloats = 16;
#elif defined(__AVX__)
constexpr int kTahVectorFloats = 8;
#else
constexpr int kTahVectorFloats = 4;
#endif

template <int W>
struct TileVec {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
};

template <int G, int W, int H>
ACTKIT_CPU_INLINE void hadamard_stages(typename TileVec<W>::F* v) {
  using F = typename TileVec<W>::F;
  using I = typename TileVec<W>::I;
  if constexpr (H < W) {
    // Lane l pairs with lane l ^ H. The lanes whose bit H is set take
    // partner - own, computed as partner + (-own): IEEE defines a - b as
    // a + (-b), so the bits are those of the subtraction, and the stage is
    // one shuffle, one sign flip and one add instead of an add, a subtract
    // and a select.
    I flip;  // the sign bit in the lanes whose bit H is set
    I partner;
    for (int l = 0; l < W; ++l) {
      flip[l] = (l & H) != 0 ? int32_t(0x80000000u) : 0;
      partner[l] = l ^ H;
    }
    for (int i = 0; i < G / W; ++i) {
#if defined(__clang__)
      F p;
      for (int l = 0; l < W; ++l) p[l] = v[i][partner[l]];
#else
      const F p = __builtin_shuffle(v[i], partner);
#endif
      v[i] = p + reinterpret_cast<F>(reinterpret_cast<I>(v[i]) ^ flip);
    }
  } else {
    constexpr int kStride = H / W;  // partner vectors are this many apart
    for (int i = 0; i < G / W; ++i) {
      if ((i & kStride) != 0) continue;
      const F a = v[i];
      const F b = v[i + kStride];
      v[i] = a + b;
      v[i + kStride] = a - b;
    }
  }
  if constexpr (2 * H < G) hadamard_stages<G, W, 2 * H>(v);
}

}  // namespace tah_detail

template <int G>
ACTKIT_CPU_INLINE void tah_hadamard_fixed(float* y) {
  static_assert(G >= 8 && G <= 256 && (G & (G - 1)) == 0, "tile sizes are powers of two in [8, 256]");
  constexpr int W = G < tah_detail::kTahVectorFloats ? G : tah_detail::kTahVectorFloats;
  typename tah_detail::TileVec<W>::F v[G / W];
  std::memcpy(v, y, sizeof v);
  tah_detail::hadamard_stages<G, W, 1>(v);
  const float norm = tah_hadamard_norm(G);
  for (int i = 0; i < G / W; ++i) v[i] = v[i] * norm;
  std::memcpy(y, v, sizeof v);
}

#endif  // !__CUDACC__

// The outlier test of TAH-Quant §3.3 on a tile's largest and second-largest
// magnitudes: r = a1 / (a2 + rho) > tau.
ACTKIT_HD bool tah_is_outlier(float a1, float a2, float tau) { return div_rn(a1, add_rn(a2, kTahRho)) > tau; }

// A tile's stored quantizer: zero Z (the minimum rounded toward -inf in
// fp16) and scale S ((max - Z) / B rounded toward +inf in fp16), B =
// 2^bits - 1, so [Z, Z + B*S] holds the tile.
struct TahTileParams {
  uint16_t zero_bits = 0;
  uint16_t scale_bits = 0;
  float zero = 0.0f;
  float scale = 0.0f;
  float inv_scale = 0.0f;  // 1 / S, 0 when S == 0
};

// Returns false when Z or S does not fit fp16.
ACTKIT_HD bool tah_tile_params(float mn, float mx, int bits, TahTileParams* out) {
  // Reductions may pick either zero; +0 makes every work split store +0.
  mn = add_rn(mn, 0.0f);
  mx = add_rn(mx, 0.0f);
  out->zero_bits = float_to_meta_directed(mn, MetaFormat::kFloat16, /*up=*/false);
  out->zero = fp16_to_float(out->zero_bits);
  const float top = float((1u << bits) - 1u);
  const float step = div_rn(sub_rn(mx, out->zero), top);
  out->scale_bits = float_to_meta_directed(step, MetaFormat::kFloat16, /*up=*/true);
  out->scale = fp16_to_float(out->scale_bits);
  if (!(std::isfinite(out->zero) && std::isfinite(out->scale))) return false;
  out->inv_scale = out->scale > 0.0f ? div_rn(1.0f, out->scale) : 0.0f;
  return true;
}

// Round-to-nearest(-even) code of y, clamped to [0, top]: adding and
// removing 1.5 * 2^23 rounds a value below 2^22 without a library call.
ACTKIT_HD uint8_t tah_code(float y, float zero, float inv_scale, float top) {
  float v = mul_rn(sub_rn(y, zero), inv_scale);
  v = v > 0.0f ? v : 0.0f;
  v = v < top ? v : top;
  const float kMagic = 12582912.0f;
  return uint8_t(int32_t(sub_rn(add_rn(v, kMagic), kMagic)));
}

// Stochastic code of y: floor(v + u) for u uniform in [0, 1), v the clamped
// position on the grid, computed as "round up when u is below the fraction"
// (v + u itself is never rounded). E[code] = v, so E[decode] = y for every y
// inside the tile's range: the Hadamard transform is linear, so a
// transformed tile decodes unbiased too.
ACTKIT_HD uint8_t tah_code_stochastic(float y, float zero, float inv_scale, float top, float u) {
  float v = mul_rn(sub_rn(y, zero), inv_scale);
  v = v > 0.0f ? v : 0.0f;
  v = v < top ? v : top;
  const float whole = float(int32_t(v));  // v >= 0: truncation is floor
  return uint8_t(int32_t(whole) + (u < sub_rn(v, whole) ? 1 : 0));
}

ACTKIT_HD float tah_value(uint32_t code, float zero, float scale) { return add_rn(mul_rn(float(code), scale), zero); }

// Rank of token t among the high tokens before it, from the exclusive
// popcount prefix of the map's 64-bit words, clamped to high_tokens; and
// whether t is coded at high bits. The clamp keeps a map with too many ones
// (an unvalidated payload) inside the code section: with rank <= high_tokens
// and rank <= t, token t's codes end before the section does.
struct TahTokenBits {
  int64_t rank;
  bool high;
};

ACTKIT_HD int popcount64(uint64_t w) {
#if defined(__CUDA_ARCH__)
  return __popcll(w);
#else
  return __builtin_popcountll(w);
#endif
}

ACTKIT_HD TahTokenBits tah_token_bits(const uint64_t* map, const int64_t* word_ranks, int64_t t,
                                      int64_t high_tokens) {
  const uint64_t word = map[t / 64];
  const int bit = int(t % 64);
  const uint64_t below = bit == 0 ? 0 : word & (~uint64_t(0) >> (64 - bit));
  int64_t rank = word_ranks[t / 64] + popcount64(below);
  rank = rank < high_tokens ? rank : high_tokens;
  return TahTokenBits{rank, ((word >> bit) & 1u) != 0 && rank < high_tokens};
}

}  // namespace actkit::kernels
