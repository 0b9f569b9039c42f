// CPU TAH-Quant: TBB over tokens. Encode makes two passes over the input:
// one for the token entropies (the ranking needs every token's before any
// token's bits are known), one for the tiles, a token at a time. The tile
// size is a compile-time constant, so the loops over a tile are whole
// vectors.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <type_traits>
#include <vector>

#include "actkit/kernels/tah.h"
#include "actkit/kernels/tah_math.h"
#include "bitpack.h"
#include "float_io.h"

namespace actkit::kernels {
namespace {

using cpu::Bf16In;
using cpu::Fp16In;

// Tokens per TBB task (8 tokens of 768 fp32 channels = 24 KiB).
constexpr int64_t kGrainTokens = 8;

// Whether any of the C values is NaN or Inf.
inline bool has_non_finite(const float* a, int64_t C) {
  float poison = 0.0f;
#pragma omp simd reduction(+ : poison)
  for (int64_t k = 0; k < C; ++k) poison += a[k] * 0.0f;
  return !(poison == 0.0f);
}

// Entropy of one token in the order of tah_math.h (32 lane sums, then the
// butterfly). Returns false when the token holds NaN or Inf.
inline bool token_entropy(const float* a, int64_t C, float* out) {
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
  }
  for (int l = 0; k + l < C; ++l) ent[l] = add_rn(ent[l], tah_entropy_term(a[k + l], inv_l1));
  *out = tah_entropy_from_sum(tah_lane_total(ent));
  return true;
}

template <typename In>
EncodeStatus entropy_all(const In* input, int64_t T, int64_t C, float* entropy) {
  std::atomic<bool> bad{false};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, T, kGrainTokens), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<float> buf(std::is_same_v<In, float> ? 0 : size_t(C));
    for (int64_t t = r.begin(); t != r.end(); ++t) {
      if (!token_entropy(cpu::load_floats(input, t * C, C, buf.data()), C, entropy + t)) {
        bad.store(true, std::memory_order_relaxed);
        return;
      }
    }
  });
  return bad.load() ? EncodeStatus::kNonFinite : EncodeStatus::kOk;
}

// Sets the map bits of the high_tokens tokens of highest entropy (ties: the
// lower index first). The order is total, so any selection algorithm picks
// the same set.
void select_tokens(const float* entropy, const TahLayout& L, uint64_t* map) {
  const int64_t T = L.num_tokens;
  const int64_t H = L.high_tokens;
  if (H == 0) return;
  std::vector<int64_t> order(static_cast<size_t>(T));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (H < T) {
    std::nth_element(order.begin(), order.begin() + H, order.end(), [&](int64_t a, int64_t b) {
      return entropy[a] > entropy[b] || (entropy[a] == entropy[b] && a < b);
    });
  }
  for (int64_t i = 0; i < H; ++i) {
    const int64_t t = order[size_t(i)];
    map[t / 64] |= uint64_t(1) << (t % 64);
  }
}

// Exclusive popcount prefix of the map words; entry W is the total.
std::vector<int64_t> word_ranks(const uint64_t* map, const TahLayout& L) {
  const int64_t W = L.map_words();
  std::vector<int64_t> ranks(size_t(W + 1));
  int64_t total = 0;
  for (int64_t w = 0; w < W; ++w) {
    ranks[size_t(w)] = total;
    total += popcount64(map[w]);
  }
  ranks[size_t(W)] = total;
  return ranks;
}

// 1 / tau rounded up by a margin that covers every rounding of the outlier
// test: a tile with two magnitudes >= a1 * that factor has a2 >= a1 / tau,
// so a1 / (a2 + rho) rounds to at most tau and the tile is no outlier.
// Infinite for tau == 0 (the prefilter then never decides).
inline float outlier_prefilter_factor(float tau) { return float(1.0 / double(tau) * (1.0 + 1e-6)); }

// The smallest and largest of G values.
template <int G>
inline void tile_min_max(const float* a, float* mn_out, float* mx_out) {
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
inline int transform_outlier(const float* a, float tau, float prefilter, float* mn, float* mx, float* out) {
  const float a1 = std::max(abs_rn(*mn), abs_rn(*mx));
  // Most tiles have a second magnitude near the first, which proves them no
  // outlier tile (same outcome as the exact test). Often the extremes
  // themselves show it: they are two different elements unless all G are
  // equal. Otherwise one counting pass looks for two near the top.
  const float thr = a1 * prefilter;
  if (std::min(abs_rn(*mn), abs_rn(*mx)) >= thr) return -1;
  int near_top = 0;
#pragma omp simd reduction(+ : near_top)
  for (int k = 0; k < G; ++k) near_top += abs_rn(a[k]) >= thr ? 1 : 0;
  if (near_top >= 2) return -1;
  int d = G;  // the first element at the maximum magnitude
#pragma omp simd reduction(min : d)
  for (int k = 0; k < G; ++k) d = abs_rn(a[k]) == a1 && k < d ? k : d;
  float a2 = 0.0f;
#pragma omp simd reduction(max : a2)
  for (int k = 0; k < G; ++k) {
    const float v = k == d ? 0.0f : abs_rn(a[k]);
    a2 = v > a2 ? v : a2;
  }
  if (!tah_is_outlier(a1, a2, tau)) return -1;
  std::copy(a, a + G, out);
  out[0] = a[d];  // the pivot swap
  out[d] = a[0];
  tah_hadamard_fixed<G>(out);
  if (has_non_finite(out, G)) {
    // Finite inputs near FLT_MAX can overflow in the butterflies (and meet
    // as Inf - Inf = NaN). Such a tile is far outside fp16's range anyway;
    // unbounded extremes make tah_tile_params refuse it on every compiler,
    // where a reduction over NaN would pick its result by vector order.
    *mn = -INFINITY;
    *mx = INFINITY;
  } else {
    tile_min_max<G>(out, mn, mx);
  }
  return d;
}

// Codes of G values under a tile's quantizer, one per byte.
template <int G>
inline void tile_codes(const float* y, const TahTileParams& p, int bits, uint8_t* q) {
  const float top = float((1u << bits) - 1u);
  const float zero = p.zero;
  const float inv = p.inv_scale;
#pragma omp simd
  for (int k = 0; k < G; ++k) q[k] = tah_code(y[k], zero, inv, top);
}

// A task's scratch for one token of C channels, K = C / G tiles.
struct TokenScratch {
  TokenScratch(int64_t C, int64_t K, bool convert)
      : values(convert ? size_t(C) : 0),
        q(size_t(C)),
        transformed(size_t(C)),
        mn(size_t(K)),
        mx(size_t(K)),
        pivot(size_t(K), -1) {}
  std::vector<float> values;           // fp16/bf16 input converted to float
  std::vector<uint8_t> q;              // codes, one per byte
  std::vector<float> transformed;      // outlier tiles after the transform
  std::vector<float> mn, mx;           // each tile's extremes as coded
  std::vector<int> pivot;              // -1: not transformed
};

// Encodes token t (values x) at `bits`, each step over all of the token's
// tiles before the next (extremes, outlier tests, quantizer and codes):
// the tiles are independent, so the long chains of dependent operations in
// each step overlap across tiles. Returns false when a tile's zero or scale
// does not fit fp16.
template <int G>
bool encode_token(const float* x, int64_t t, int bits, const TahEncodeArgs& a, float prefilter, TokenScratch& s) {
  const TahLayout& L = a.layout;
  const int64_t K = L.tiles_per_token();
  for (int64_t j = 0; j < K; ++j) {
    tile_min_max<G>(x + j * G, &s.mn[size_t(j)], &s.mx[size_t(j)]);
  }
  if (a.hadamard) {
    for (int64_t j = 0; j < K; ++j) {
      s.pivot[size_t(j)] = transform_outlier<G>(x + j * G, a.tau, prefilter, &s.mn[size_t(j)], &s.mx[size_t(j)],
                                                s.transformed.data() + j * G);
    }
  }
  const int64_t first = t * K;  // the token's first tile in the payload
  uint16_t* params = reinterpret_cast<uint16_t*>(a.payload + L.params_offset()) + 2 * first;
  uint8_t* pivots = a.payload + L.pivots_offset() + first;
  uint8_t* flags = a.payload + L.flags_offset();
  for (int64_t j = 0; j < K; ++j) {
    TahTileParams p;
    if (!tah_tile_params(s.mn[size_t(j)], s.mx[size_t(j)], bits, &p)) return false;
    const bool transformed = s.pivot[size_t(j)] >= 0;
    const float* y = transformed ? s.transformed.data() + j * G : x + j * G;  // the values as coded
    tile_codes<G>(y, p, bits, s.q.data() + j * G);
    params[2 * j] = p.zero_bits;
    params[2 * j + 1] = p.scale_bits;
    if (transformed) {
      pivots[j] = uint8_t(s.pivot[size_t(j)]);
      // Tiles of neighbouring tasks share flag bytes.
      cpu::atomic_or_byte(flags + (first + j) / 8, uint8_t(1u << ((first + j) % 8)));
    }
  }
  return true;
}

template <typename In, int G>
EncodeStatus encode_all(const TahEncodeArgs& a) {
  const TahLayout& L = a.layout;
  const In* input = static_cast<const In*>(a.input);
  const int64_t T = L.num_tokens;
  const int64_t C = L.channels;
  std::vector<float> entropy(static_cast<size_t>(T));
  if (entropy_all(input, T, C, entropy.data()) != EncodeStatus::kOk) return EncodeStatus::kNonFinite;
  uint64_t* map = reinterpret_cast<uint64_t*>(a.payload + L.map_offset());
  select_tokens(entropy.data(), L, map);
  const std::vector<int64_t> ranks = word_ranks(map, L);

  const float prefilter = outlier_prefilter_factor(a.tau);
  std::atomic<bool> overflow{false};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, T, kGrainTokens), [&](const tbb::blocked_range<int64_t>& r) {
    TokenScratch scratch(C, L.tiles_per_token(), !std::is_same_v<In, float>);
    for (int64_t t = r.begin(); t != r.end(); ++t) {
      const float* x = cpu::load_floats(input, t * C, C, scratch.values.data());
      const TahTokenBits tb = tah_token_bits(map, ranks.data(), t, L.high_tokens);
      const int bits = tb.high ? L.high_bits : L.low_bits;
      if (!encode_token<G>(x, t, bits, a, prefilter, scratch)) {
        overflow.store(true, std::memory_order_relaxed);
        return;
      }
      // A token's codes are whole bytes of their own.
      cpu::pack_codes(scratch.q.data(), C, bits, a.payload + L.token_codes_offset(t, tb.rank), 0);
    }
  });
  return overflow.load() ? EncodeStatus::kMetaOverflow : EncodeStatus::kOk;
}

// Calls f(std::integral_constant<int, G>{}) for the layout's tile size G:
// one instance of a kernel per tile size the layout accepts.
template <typename F>
decltype(auto) with_group_size(int g, F&& f) {
  switch (g) {
    case 8: return f(std::integral_constant<int, 8>{});
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
    default: std::abort();  // the layout was validated: a power of two in [8, 256]
  }
}

template <typename In>
EncodeStatus encode_sized(const TahEncodeArgs& a) {
  return with_group_size(a.layout.group_size, [&](auto g) { return encode_all<In, decltype(g)::value>(a); });
}

template <typename Out, int G>
void decode_all(const TahDecodeArgs& a, const std::vector<int64_t>& ranks) {
  const TahLayout& L = a.layout;
  Out* output = static_cast<Out*>(a.output);
  const int64_t K = L.tiles_per_token();
  constexpr int g = G;
  const uint64_t* map = reinterpret_cast<const uint64_t*>(a.payload + L.map_offset());
  const uint16_t* params = reinterpret_cast<const uint16_t*>(a.payload + L.params_offset());
  const uint8_t* pivots = a.payload + L.pivots_offset();
  const uint8_t* flags = a.payload + L.flags_offset();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, L.num_tokens, kGrainTokens),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      alignas(64) uint8_t q[kTahMaxGroupSize];
                      alignas(64) float ybuf[kTahMaxGroupSize];
                      for (int64_t t = r.begin(); t != r.end(); ++t) {
                        const TahTokenBits tb = tah_token_bits(map, ranks.data(), t, L.high_tokens);
                        const int bits = tb.high ? L.high_bits : L.low_bits;
                        const uint8_t* codes = a.payload + L.token_codes_offset(t, tb.rank);
                        for (int64_t j = 0; j < K; ++j) {
                          const int64_t i = t * K + j;
                          const int64_t elem = t * L.channels + j * g;
                          cpu::unpack_codes(codes + j * g * bits / 8, 0, g, bits, q);
                          const float zero = fp16_to_float(params[2 * i]);
                          const float scale = fp16_to_float(params[2 * i + 1]);
                          float* y = ybuf;
                          if constexpr (std::is_same_v<Out, float>) y = output + elem;
#pragma omp simd
                          for (int k = 0; k < g; ++k) y[k] = tah_value(q[k], zero, scale);
                          if ((flags[i / 8] >> (i % 8)) & 1u) {
                            tah_hadamard_fixed<G>(y);
                            std::swap(y[0], y[pivots[i] & (g - 1)]);
                          }
                          if constexpr (!std::is_same_v<Out, float>) cpu::from_float(ybuf, g, output + elem);
                        }
                      }
                    });
}

template <typename Out>
void decode_sized(const TahDecodeArgs& a, const std::vector<int64_t>& ranks) {
  with_group_size(a.layout.group_size, [&](auto g) { decode_all<Out, decltype(g)::value>(a, ranks); });
}

}  // namespace

EncodeStatus tah_entropy_cpu(const void* input, FloatType type, int64_t num_tokens, int64_t channels,
                             float* entropy) {
  switch (type) {
    case FloatType::kFloat32: return entropy_all(static_cast<const float*>(input), num_tokens, channels, entropy);
    case FloatType::kFloat16: return entropy_all(static_cast<const Fp16In*>(input), num_tokens, channels, entropy);
    case FloatType::kBFloat16:
      return entropy_all(static_cast<const Bf16In*>(input), num_tokens, channels, entropy);
  }
  return EncodeStatus::kOk;
}

EncodeStatus tah_encode_cpu(const TahEncodeArgs& args) {
  switch (args.input_type) {
    case FloatType::kFloat32: return encode_sized<float>(args);
    case FloatType::kFloat16: return encode_sized<Fp16In>(args);
    case FloatType::kBFloat16: return encode_sized<Bf16In>(args);
  }
  return EncodeStatus::kOk;
}

bool tah_decode_cpu(const TahDecodeArgs& args) {
  const TahLayout& L = args.layout;
  const std::vector<int64_t> ranks =
      word_ranks(reinterpret_cast<const uint64_t*>(args.payload + L.map_offset()), L);
  if (ranks.back() != L.high_tokens) return false;
  switch (args.output_type) {
    case FloatType::kFloat32: decode_sized<float>(args, ranks); break;
    case FloatType::kFloat16: decode_sized<Fp16In>(args, ranks); break;
    case FloatType::kBFloat16: decode_sized<Bf16In>(args, ranks); break;
  }
  return true;
}

}  // namespace actkit::kernels
