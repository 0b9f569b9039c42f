// TAH-Quant's decode over a range of tokens: each tile's codes, its
// quantizer, and for an outlier tile the inverse transform and pivot swap.
// Built with 256-bit vectors preferred on every path (kernels/CMakeLists.txt):
// on the build machine its AVX-512 build decoded at 23 GB/s with 512-bit
// loops against 29-30 GB/s with 256-bit ones. The preference covers the
// loops the compiler vectorizes; the 3/5/6/7-bit unpack of bitpack.h and
// the in-register transform of tah_math.h use 512-bit vectors there by hand.
#include <cstdint>

#include "actkit/kernels/tah_math.h"
#include "bitpack.h"
#include "float_io.h"
#include "isa_functions.h"
#include "tile_size.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

using cpu::Bf16In;
using cpu::Fp16In;

// Codes unpacked per call: whole tiles, at least one, so a token of 768
// channels at 64 per tile takes one call instead of 12, each choosing its
// path by the bit width (with the tiles' fp16 parameters converted as one
// vector loop, the 2-bit decode rose from 1.27x memcpy to 1.58-1.83x on a
// Cascade Lake Xeon; docs/benchmarks.md).
constexpr int64_t kChunkCodes = 1024;

template <typename Out, int G>
void decode_tokens(const TahDecodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1) {
  const TahLayout& L = a.layout;
  Out* output = static_cast<Out*>(a.output);
  const int64_t K = L.channels / G;  // tiles per token; G is a constant, so a shift
  constexpr int64_t kChunkTiles = kChunkCodes / G > 0 ? kChunkCodes / G : 1;
  const uint64_t* map = reinterpret_cast<const uint64_t*>(a.payload + L.map_offset());
  const uint16_t* params = reinterpret_cast<const uint16_t*>(a.payload + L.params_offset());
  const uint8_t* pivots = a.payload + L.pivots_offset();
  const uint8_t* flags = a.payload + L.flags_offset();
  alignas(64) uint8_t q[kChunkTiles * G];
  alignas(64) float zero_scale[2 * kChunkTiles];
  alignas(64) float ybuf[G];
  for (int64_t t = t0; t != t1; ++t) {
    const TahTokenBits tb = tah_token_bits(map, ranks, t, L.high_tokens);
    const int bits = tb.high ? L.high_bits : L.low_bits;
    const uint8_t* codes = a.payload + L.token_codes_offset(t, tb.rank);
    for (int64_t j0 = 0; j0 < K; j0 += kChunkTiles) {
      const int64_t tiles = K - j0 < kChunkTiles ? K - j0 : kChunkTiles;
      cpu::unpack_codes(codes + j0 * G * bits / 8, 0, tiles * G, bits, q);
      const uint16_t* chunk_params = params + 2 * (t * K + j0);
#pragma omp simd
      for (int64_t k = 0; k < 2 * tiles; ++k) zero_scale[k] = fp16_to_float(chunk_params[k]);
      for (int64_t jj = 0; jj < tiles; ++jj) {
        const int64_t i = t * K + j0 + jj;
        const float zero = zero_scale[2 * jj];
        const float scale = zero_scale[2 * jj + 1];
        const uint8_t* qt = q + jj * G;
        float* y = cpu::is_float_v<Out> ? reinterpret_cast<float*>(output + i * G) : ybuf;
#pragma omp simd
        for (int k = 0; k < G; ++k) y[k] = tah_value(qt[k], zero, scale);
        if ((flags[i / 8] >> (i % 8)) & 1u) {
          tah_hadamard_fixed<G>(y);
          const int p = pivots[i] & (G - 1);
          const float first = y[0];
          y[0] = y[p];
          y[p] = first;
        }
        if constexpr (!cpu::is_float_v<Out>) cpu::from_float(ybuf, G, output + i * G);
      }
    }
  }
}

template <typename Out>
void decode_sized(const TahDecodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1) {
  with_group_size(a.layout.group_size, [&](auto g) { decode_tokens<Out, decltype(g)::value>(a, ranks, t0, t1); });
}

}  // namespace

void tah_decode(const TahDecodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1) {
  switch (a.output_type) {
    case FloatType::kFloat32: decode_sized<float>(a, ranks, t0, t1); break;
    case FloatType::kFloat16: decode_sized<Fp16In>(a, ranks, t0, t1); break;
    case FloatType::kBFloat16: decode_sized<Bf16In>(a, ranks, t0, t1); break;
  }
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
