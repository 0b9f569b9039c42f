// TAH-Quant over a range of tokens: the token entropies and the tiles of each
// token (extremes, outlier tests and transform, quantizer, codes); the decode
// is tah_decode_isa.cpp. The tile size is a compile-time constant, so the loops over a tile
// are whole vectors.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "actkit/kernels/tah_math.h"
#include "bitpack.h"
#include "float_io.h"
#include "isa_functions.h"
#include "tile_size.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

using cpu::Bf16In;
using cpu::Fp16In;

// Whether any of the C values is NaN or Inf.
ACTKIT_CPU_INLINE bool has_non_finite(const float* a, int64_t C) {
  // An integer OR on the exponent bits reduces as a vector; a float sum
  // would end in a chain of scalar adds, one per lane.
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t k = 0; k < C; ++k) bad |= (float_bits(a[k]) & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
  return bad != 0;
}

// Entropy of one token in the order of tah_math.h (32 lane sums, then the
// butterfly), its input read as In; `next` prefetches the next token, a
// slice beside each slice of the entropy terms. Returns false when the token
// holds NaN or Inf.
template <typename In>
ACTKIT_CPU_INLINE bool token_entropy(const float* a, int64_t C, cpu::Prefetcher& next, float* out) {
  alignas(64) float acc[kTahLanes] = {};
  int64_t k = 0;
  for (; k + kTahLanes <= C; k += kTahLanes) {
#pragma omp simd
    for (int l = 0; l < kTahLanes; ++l) acc[l] = add_rn(acc[l], abs_rn(a[k + l]));
  }
  for (int l = 0; k + l < C; ++l) acc[l] = add_rn(acc[l], abs_rn(a[k + l]));
  const float l1 = tah_lane_total(acc);
  // A finite sum of magnitudes proves every value finite, so only a sum
  // that is not (NaN or Inf among the values, or an overflow) is checked.
  if (!std::isfinite(l1) && has_non_finite(a, C)) return false;
  const float inv_l1 = tah_inv_l1(l1);

  alignas(64) float ent[kTahLanes] = {};
  for (k = 0; k + kTahLanes <= C; k += kTahLanes) {
#pragma omp simd
    for (int l = 0; l < kTahLanes; ++l) ent[l] = add_rn(ent[l], tah_entropy_term(a[k + l], inv_l1));
    next.advance(kTahLanes * int64_t(sizeof(In)));
  }
  for (int l = 0; k + l < C; ++l) ent[l] = add_rn(ent[l], tah_entropy_term(a[k + l], inv_l1));
  next.finish();
  *out = tah_entropy_from_sum(tah_lane_total(ent));
  return true;
}

template <typename In>
bool entropy_typed(const void* input, int64_t C, int64_t t0, int64_t t1, float* entropy, float* buf) {
  const In* in = static_cast<const In*>(input);
  for (int64_t t = t0; t != t1; ++t) {
    cpu::Prefetcher next = t + 1 != t1 ? cpu::prefetch_values(in, (t + 1) * C, C) : cpu::Prefetcher();
    if (!token_entropy<In>(cpu::load_floats(in, t * C, C, buf), C, next, entropy + t)) return false;
  }
  return true;
}

// 1 / tau rounded up by a margin that covers every rounding of the outlier
// test: a tile with two magnitudes >= a1 * that factor has a2 >= a1 / tau,
// so a1 / (a2 + rho) rounds to at most tau and the tile is no outlier.
// Infinite for tau == 0 (the prefilter then never decides).
ACTKIT_CPU_INLINE float outlier_prefilter_factor(float tau) { return float(1.0 / double(tau) * (1.0 + 1e-6)); }

// The smallest and largest of G values.
template <int G>
ACTKIT_CPU_INLINE void tile_min_max(const float* a, float* mn_out, float* mx_out) {
  float mn = a[0];
  float mx = a[0];
#pragma omp simd reduction(min : mn) reduction(max : mx)
  for (int k = 0; k < G; ++k) {
    mn = a[k] < mn ? a[k] : mn;
    mx = a[k] > mx ? a[k] : mx;
  }
  *mn_out = mn;
  *mx_out = mx;
}

// The outlier test of one tile whose extremes are mn and mx. On an outlier
// tile, writes the pivot-swapped, transformed tile to `out`, its new
// extremes to mn and mx, and returns its pivot (the element swapped to 0);
// otherwise returns -1 and writes nothing.
template <int G>
ACTKIT_CPU_INLINE int transform_outlier(const float* a, float tau, float prefilter, float* mn, float* mx, float* out) {
  const float a1 = abs_rn(*mn) > abs_rn(*mx) ? abs_rn(*mn) : abs_rn(*mx);
  // Most tiles have a second magnitude near the first, which proves them no
  // outlier tile (same outcome as the exact test). Often the extremes
  // themselves show it: they are two different elements unless all G are
  // equal. Otherwise one counting pass looks for two near the top.
  const float thr = a1 * prefilter;
  if ((abs_rn(*mn) < abs_rn(*mx) ? abs_rn(*mn) : abs_rn(*mx)) >= thr) return -1;
  // One pass: how many magnitudes reach thr, the first element at the
  // maximum magnitude (d), and the largest magnitude below thr. When exactly
  // one reaches thr it is element d, and every other one is below thr, so
  // that largest magnitude is a2, the largest of the others.
  int near_top = 0;
  int d = G;
  float below = 0.0f;
#pragma omp simd reduction(+ : near_top) reduction(min : d) reduction(max : below)
  for (int k = 0; k < G; ++k) {
    const float v = abs_rn(a[k]);
    near_top += v >= thr ? 1 : 0;
    d = v == a1 && k < d ? k : d;
    below = v < thr && v > below ? v : below;
  }
  if (near_top >= 2) return -1;
  float a2 = below;
  if (near_top == 0) {
    // thr above a1 (tau < 1, or tau == 0): the second magnitude the long way.
    a2 = 0.0f;
#pragma omp simd reduction(max : a2)
    for (int k = 0; k < G; ++k) {
      const float v = k == d ? 0.0f : abs_rn(a[k]);
      a2 = v > a2 ? v : a2;
    }
  }
  if (!tah_is_outlier(a1, a2, tau)) return -1;
  std::memcpy(out, a, sizeof(float) * G);
  out[0] = a[d];  // the pivot swap
  out[d] = a[0];
  tah_hadamard_fixed<G>(out);
  // The new extremes and the non-finite check in one pass.
  float lo = out[0];
  float hi = out[0];
  uint32_t bad = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(| : bad)
  for (int k = 0; k < G; ++k) {
    lo = out[k] < lo ? out[k] : lo;
    hi = out[k] > hi ? out[k] : hi;
    bad |= (float_bits(out[k]) & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
  }
  if (bad != 0) {
    // Finite inputs near FLT_MAX can overflow in the butterflies (and meet
    // as Inf - Inf = NaN). Such a tile is far outside fp16's range anyway;
    // unbounded extremes make tah_tile_params refuse it on every compiler,
    // where a reduction over NaN would pick its result by vector order.
    *mn = -INFINITY;
    *mx = INFINITY;
  } else {
    *mn = lo;
    *mx = hi;
  }
  return d;
}

// Codes of G values under a tile's quantizer, one per byte, rounded to
// nearest.
template <int G>
ACTKIT_CPU_INLINE void tile_codes(const float* y, const TahTileParams& p, int bits, uint8_t* q) {
  const float top = float((1u << bits) - 1u);
  const float zero = p.zero;
  const float inv = p.inv_scale;
#pragma omp simd
  for (int k = 0; k < G; ++k) q[k] = tah_code(y[k], zero, inv, top);
}

// The same, rounded stochastically; the tile's first value is element
// `start` of the stream (token t's channel j * G is element t * C + j * G).
template <int G>
ACTKIT_CPU_INLINE void tile_codes_stochastic(const float* y, const TahTileParams& p, int bits, RngKey key,
                                             uint64_t start, uint8_t* q) {
  const float top = float((1u << bits) - 1u);
  const float zero = p.zero;
  const float inv = p.inv_scale;
  const uint32_t lo0 = uint32_t(start);
  // start is a multiple of G (C is), and G divides 2^32: a tile's low words
  // never wrap, so one high word serves the whole tile.
  const uint32_t mix = counter_high_mix(key, uint32_t(start >> 32));
#pragma omp simd
  for (int k = 0; k < G; ++k) {
    const uint32_t h = counter_hash_mixed(key.k0, lo0 + uint32_t(k), mix);
    q[k] = tah_code_stochastic(y[k], zero, inv, top, counter_bits_to_uniform(h));
  }
}

// Encodes token t (values x, read as In) at `bits`, each step over all of
// the token's tiles before the next (extremes, outlier tests, quantizer and
// codes): the tiles are independent, so the long chains of dependent
// operations in each step overlap across tiles. `next` prefetches the next
// token, a tile's worth beside each tile's codes. Returns false when a
// tile's zero or scale does not fit fp16.
template <typename In, int G>
ACTKIT_CPU_INLINE bool encode_token(const float* x, int64_t t, int bits, const TahEncodeArgs& a, float prefilter,
                                    const cpu::TahScratch& s, cpu::Prefetcher& next) {
  const TahLayout& L = a.layout;
  const int64_t K = L.channels / G;  // tiles per token; G is a constant, so a shift
  for (int64_t j = 0; j < K; ++j) {
    tile_min_max<G>(x + j * G, &s.mn[j], &s.mx[j]);
  }
  if (a.hadamard) {
    for (int64_t j = 0; j < K; ++j) {
      s.pivot[j] = transform_outlier<G>(x + j * G, a.tau, prefilter, &s.mn[j], &s.mx[j],
                                                s.transformed + j * G);
    }
  }
  const int64_t first = t * K;  // the token's first tile in the payload
  uint16_t* params = reinterpret_cast<uint16_t*>(a.payload + L.params_offset()) + 2 * first;
  uint8_t* pivots = a.payload + L.pivots_offset() + first;
  uint8_t* flags = a.payload + L.flags_offset();
  for (int64_t j = 0; j < K; ++j) {
    next.advance(G * int64_t(sizeof(In)));
    TahTileParams p;
    if (!tah_tile_params(s.mn[j], s.mx[j], bits, &p)) return false;
    const bool transformed = s.pivot[j] >= 0;
    const float* y = transformed ? s.transformed + j * G : x + j * G;  // the values as coded
    if (a.stochastic) {
      tile_codes_stochastic<G>(y, p, bits, a.key, uint64_t(t * L.channels + j * G), s.q + j * G);
    } else {
      tile_codes<G>(y, p, bits, s.q + j * G);
    }
    params[2 * j] = p.zero_bits;
    params[2 * j + 1] = p.scale_bits;
    if (transformed) {
      pivots[j] = uint8_t(s.pivot[j]);
      // Tiles of neighbouring tasks share flag bytes.
      cpu::atomic_or_byte(flags + (first + j) / 8, uint8_t(1u << ((first + j) % 8)));
    }
  }
  return true;
}

template <typename In, int G>
bool encode_tokens(const TahEncodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1, const cpu::TahScratch& s) {
  const TahLayout& L = a.layout;
  const In* input = static_cast<const In*>(a.input);
  const int64_t C = L.channels;
  const uint64_t* map = reinterpret_cast<const uint64_t*>(a.payload + L.map_offset());
  const float prefilter = outlier_prefilter_factor(a.tau);
  for (int64_t t = t0; t != t1; ++t) {
    cpu::Prefetcher next = t + 1 != t1 ? cpu::prefetch_values(input, (t + 1) * C, C) : cpu::Prefetcher();
    const float* x = cpu::load_floats(input, t * C, C, s.values);
    const TahTokenBits tb = tah_token_bits(map, ranks, t, L.high_tokens);
    const int bits = tb.high ? L.high_bits : L.low_bits;
    if (!encode_token<In, G>(x, t, bits, a, prefilter, s, next)) return false;
    // A token's codes are whole bytes of their own.
    cpu::pack_codes(s.q, C, bits, a.payload + L.token_codes_offset(t, tb.rank), 0);
  }
  return true;
}

template <typename In>
bool encode_sized(const TahEncodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1, const cpu::TahScratch& s) {
  return with_group_size(a.layout.group_size,
                         [&](auto g) { return encode_tokens<In, decltype(g)::value>(a, ranks, t0, t1, s); });
}

}  // namespace

bool tah_entropy(const void* input, FloatType type, int64_t channels, int64_t t0, int64_t t1, float* entropy,
                 float* buf) {
  switch (type) {
    case FloatType::kFloat32: return entropy_typed<float>(input, channels, t0, t1, entropy, buf);
    case FloatType::kFloat16: return entropy_typed<Fp16In>(input, channels, t0, t1, entropy, buf);
    case FloatType::kBFloat16: return entropy_typed<Bf16In>(input, channels, t0, t1, entropy, buf);
  }
  return true;
}

bool tah_encode(const TahEncodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1, const cpu::TahScratch& s) {
  switch (a.input_type) {
    case FloatType::kFloat32: return encode_sized<float>(a, ranks, t0, t1, s);
    case FloatType::kFloat16: return encode_sized<Fp16In>(a, ranks, t0, t1, s);
    case FloatType::kBFloat16: return encode_sized<Bf16In>(a, ranks, t0, t1, s);
  }
  return true;
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
