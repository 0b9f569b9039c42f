// DirectQ over a range of elements, kDirectQRun values at a time in local
// buffers, so every inner loop is a simple vectorizable pass. Ranges start
// at multiples of 8 values, hence on whole bytes of the code stream.
#include <cstdint>

#include "actkit/kernels/directq_math.h"
#include "bitpack.h"
#include "float_io.h"
#include "isa_functions.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

using cpu::Bf16In;
using cpu::Fp16In;
using cpu::kDirectQRun;

ACTKIT_CPU_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// max |x| bits over one run.
ACTKIT_CPU_INLINE uint32_t run_max(const float* x, int64_t len) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t a = abs_bits(x[j]);
    m = a > m ? a : m;
  }
  return m;
}

// Per-channel maxima of one run that starts at channel c0, into m[C].
ACTKIT_CPU_INLINE void run_channel_max(const float* x, int64_t len, int64_t c0, int64_t C, uint32_t* m) {
  for (int64_t j = 0, c = c0; j < len; c = 0) {
    const int64_t n = min64(len - j, C - c);
    uint32_t* mc = m + c;
    const float* xj = x + j;
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) {
      const uint32_t a = abs_bits(xj[k]);
      mc[k] = a > mc[k] ? a : mc[k];
    }
    j += n;
  }
}

template <typename In>
uint32_t max_abs(const DirectQEncodeArgs& a, int64_t begin, int64_t end) {
  const In* input = static_cast<const In*>(a.input);
  alignas(64) float buf[kDirectQRun];
  uint32_t acc = 0;
  for (int64_t start = begin; start < end; start += kDirectQRun) {
    const int64_t len = min64(kDirectQRun, end - start);
    const uint32_t m = run_max(cpu::load_floats(input, start, len, buf), len);
    acc = m > acc ? m : acc;
  }
  return acc;
}

template <typename In>
void channel_max(const DirectQEncodeArgs& a, int64_t begin, int64_t end, uint32_t* maxima) {
  const In* input = static_cast<const In*>(a.input);
  alignas(64) float buf[kDirectQRun];
  for (int64_t start = begin; start < end; start += kDirectQRun) {
    const int64_t len = min64(kDirectQRun, end - start);
    run_channel_max(cpu::load_floats(input, start, len, buf), len, start % a.num_scales, a.num_scales, maxima);
  }
}

// Codes of one piece [start, start + len) of a run into codes[0, len). inv
// holds the factor h / s per channel (or one factor when !kPerChannel); top
// is h. The low word of a stochastic piece's element index must not wrap
// (quantize_run cuts there), so one high word serves the piece and the loops
// stay in 32-bit lanes.
template <bool kPerChannel, bool kStochastic, bool kFull>
ACTKIT_CPU_INLINE void quantize_piece(const float* x, int64_t len, int64_t start, const float* inv, int64_t C,
                                      float top, RngKey key, uint8_t* codes) {
  const uint32_t lo0 = uint32_t(uint64_t(start));
  const uint32_t mix = counter_high_mix(key, uint32_t(uint64_t(start) >> 32));
  for (int64_t j = 0, c = kPerChannel ? start % C : 0; j < len; c = 0) {
    const uint32_t n = uint32_t(kPerChannel ? min64(len - j, C - c) : len);
    const float* f = inv + c;
    const float* xj = x + j;
    uint8_t* out = codes + j;
    const uint32_t lo_j = lo0 + uint32_t(j);
#pragma omp simd
    for (uint32_t k = 0; k < n; ++k) {
      const float s = kPerChannel ? f[k] : f[0];
      if constexpr (kStochastic) {
        const uint32_t h = counter_hash_mixed(key.k0, lo_j + k, mix);
        out[k] = directq_code_stochastic(xj[k], s, top, counter_bits_to_uniform(h));
      } else if constexpr (kFull) {
        out[k] = directq_code_nearest_full(xj[k], s, top);
      } else {
        out[k] = directq_code_nearest(xj[k], s, top);
      }
    }
    j += n;
  }
}

// Codes of one run (len <= kDirectQRun), as one piece or, where the low word
// of a stochastic run's element index wraps (at most once), two.
template <bool kPerChannel, bool kStochastic, bool kFull>
ACTKIT_CPU_INLINE void quantize_run(const float* x, int64_t len, int64_t start, const float* inv, int64_t C,
                                    float top, RngKey key, uint8_t* codes) {
  if constexpr (kStochastic) {
    const int64_t first = counters_before_wrap(uint64_t(start), len);
    if (first < len) {
      quantize_piece<kPerChannel, kStochastic, kFull>(x, first, start, inv, C, top, key, codes);
      quantize_piece<kPerChannel, kStochastic, kFull>(x + first, len - first, start + first, inv, C, top, key,
                                                      codes + first);
      return;
    }
  }
  quantize_piece<kPerChannel, kStochastic, kFull>(x, len, start, inv, C, top, key, codes);
}

template <typename In, bool kPerChannel, bool kStochastic, bool kFull = false>
void quantize(const DirectQEncodeArgs& a, const float* inv, int64_t begin, int64_t end) {
  const In* input = static_cast<const In*>(a.input);
  const float top = directq_half(a.bits, a.grid);
  const RngKey key = a.key;
  alignas(64) float buf[kDirectQRun];
  alignas(64) uint8_t codes[kDirectQRun];
  for (int64_t start = begin; start < end; start += kDirectQRun) {
    const int64_t len = min64(kDirectQRun, end - start);
    const float* x = cpu::load_floats(input, start, len, buf);
    quantize_run<kPerChannel, kStochastic, kFull>(x, len, start, inv, a.num_scales, top, key, codes);
    cpu::pack_codes(codes, len, a.bits, a.codes, start * a.bits);
  }
}

template <typename In>
void quantize_typed(const DirectQEncodeArgs& a, const float* inv, int64_t begin, int64_t end) {
  const bool per_channel = a.num_scales > 1;
  // Stochastic codes are one formula on both grids; round-to-nearest is not.
  const bool full_nearest = a.grid == DirectQGrid::kFull && !a.stochastic;
  if (per_channel && full_nearest) return quantize<In, true, false, true>(a, inv, begin, end);
  if (!per_channel && full_nearest) return quantize<In, false, false, true>(a, inv, begin, end);
  if (per_channel && a.stochastic) quantize<In, true, true>(a, inv, begin, end);
  if (per_channel && !a.stochastic) quantize<In, true, false>(a, inv, begin, end);
  if (!per_channel && a.stochastic) quantize<In, false, true>(a, inv, begin, end);
  if (!per_channel && !a.stochastic) quantize<In, false, false>(a, inv, begin, end);
}

template <typename Out>
void decode_typed(const DirectQDecodeArgs& a, const float* step, int64_t begin, int64_t end) {
  Out* output = static_cast<Out*>(a.output);
  const float half = directq_half(a.bits, a.grid);
  const int32_t top_code = directq_top_code(a.bits, a.grid);
  const int64_t C = a.num_scales;
  alignas(64) uint8_t codes[kDirectQRun];
  alignas(64) float ybuf[kDirectQRun];
  for (int64_t start = begin; start < end; start += kDirectQRun) {
    const int64_t len = min64(kDirectQRun, end - start);
    cpu::unpack_codes(a.codes, start * a.bits, len, a.bits, codes);
    float* y = cpu::is_float_v<Out> ? reinterpret_cast<float*>(output + start) : ybuf;
    if (C == 1) {
      const float s0 = step[0];
#pragma omp simd
      for (int64_t k = 0; k < len; ++k) y[k] = directq_value(codes[k], s0, half, top_code);
    } else {
      for (int64_t j = 0, c = start % C; j < len; c = 0) {
        const int64_t n = min64(len - j, C - c);
        const float* s = step + c;
        const uint8_t* q = codes + j;
        float* yj = y + j;
#pragma omp simd
        for (int64_t k = 0; k < n; ++k) yj[k] = directq_value(q[k], s[k], half, top_code);
        j += n;
      }
    }
    if constexpr (!cpu::is_float_v<Out>) cpu::from_float(ybuf, len, output + start);
  }
}

}  // namespace

uint32_t directq_max_abs(const DirectQEncodeArgs& a, int64_t begin, int64_t end) {
  switch (a.input_type) {
    case FloatType::kFloat32: return max_abs<float>(a, begin, end);
    case FloatType::kFloat16: return max_abs<Fp16In>(a, begin, end);
    case FloatType::kBFloat16: return max_abs<Bf16In>(a, begin, end);
  }
  return 0;
}

void directq_channel_max(const DirectQEncodeArgs& a, int64_t begin, int64_t end, uint32_t* maxima) {
  switch (a.input_type) {
    case FloatType::kFloat32: channel_max<float>(a, begin, end, maxima); break;
    case FloatType::kFloat16: channel_max<Fp16In>(a, begin, end, maxima); break;
    case FloatType::kBFloat16: channel_max<Bf16In>(a, begin, end, maxima); break;
  }
}

void directq_quantize(const DirectQEncodeArgs& a, const float* inv_step, int64_t begin, int64_t end) {
  switch (a.input_type) {
    case FloatType::kFloat32: quantize_typed<float>(a, inv_step, begin, end); break;
    case FloatType::kFloat16: quantize_typed<Fp16In>(a, inv_step, begin, end); break;
    case FloatType::kBFloat16: quantize_typed<Bf16In>(a, inv_step, begin, end); break;
  }
}

void directq_decode(const DirectQDecodeArgs& a, const float* step, int64_t begin, int64_t end) {
  switch (a.output_type) {
    case FloatType::kFloat32: decode_typed<float>(a, step, begin, end); break;
    case FloatType::kFloat16: decode_typed<Fp16In>(a, step, begin, end); break;
    case FloatType::kBFloat16: decode_typed<Bf16In>(a, step, begin, end); break;
  }
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
