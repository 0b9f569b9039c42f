// CPU DirectQ: one TBB pass reduces the scales, a second quantizes runs of
// kRun values at a time in local buffers, so every inner loop is a simple
// vectorizable pass. Runs start at multiples of 8 values, hence on whole
// bytes of the code stream, and never share a byte with another run.
#include <tbb/blocked_range.h>
#include <tbb/combinable.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <vector>

#include "actkit/kernels/directq.h"
#include "actkit/kernels/directq_math.h"
#include "bitpack.h"
#include "float_io.h"

namespace actkit::kernels {
namespace {

using cpu::Bf16In;
using cpu::Fp16In;

// Values per run (a multiple of 8) and runs per TBB task (64 KiB of fp32).
constexpr int64_t kRun = 4096;
constexpr int64_t kGrainRuns = 4;

int64_t num_runs(int64_t numel) { return (numel + kRun - 1) / kRun; }

// max |x| bits over one run.
inline uint32_t run_max(const float* x, int64_t len) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t a = abs_bits(x[j]);
    m = a > m ? a : m;
  }
  return m;
}

// Per-channel maxima of one run that starts at channel c0, into m[C].
inline void run_channel_max(const float* x, int64_t len, int64_t c0, int64_t C, uint32_t* m) {
  for (int64_t j = 0, c = c0; j < len; c = 0) {
    const int64_t n = std::min(len - j, C - c);
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

// Fills a.scales; returns false when a scale is NaN or Inf.
template <typename In>
bool reduce_scales(const DirectQEncodeArgs& a) {
  const In* input = static_cast<const In*>(a.input);
  const int64_t runs = num_runs(a.numel);
  std::vector<uint32_t> m(size_t(a.num_scales), 0u);
  if (a.num_scales == 1) {
    m[0] = tbb::parallel_reduce(
        tbb::blocked_range<int64_t>(0, runs, kGrainRuns), 0u,
        [&](const tbb::blocked_range<int64_t>& r, uint32_t acc) {
          alignas(64) float buf[kRun];
          for (int64_t i = r.begin(); i != r.end(); ++i) {
            const int64_t start = i * kRun;
            const int64_t len = std::min(kRun, a.numel - start);
            acc = std::max(acc, run_max(cpu::load_floats(input, start, len, buf), len));
          }
          return acc;
        },
        [](uint32_t x, uint32_t y) { return std::max(x, y); });
  } else {
    // Each worker keeps its own maxima; max is order-free, so merging them
    // in any order gives the same scales.
    tbb::combinable<std::vector<uint32_t>> local([&] { return std::vector<uint32_t>(size_t(a.num_scales), 0u); });
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, runs, kGrainRuns), [&](const tbb::blocked_range<int64_t>& r) {
      alignas(64) float buf[kRun];
      std::vector<uint32_t>& mine = local.local();
      for (int64_t i = r.begin(); i != r.end(); ++i) {
        const int64_t start = i * kRun;
        const int64_t len = std::min(kRun, a.numel - start);
        run_channel_max(cpu::load_floats(input, start, len, buf), len, start % a.num_scales, a.num_scales,
                        mine.data());
      }
    });
    local.combine_each([&](const std::vector<uint32_t>& v) {
      for (size_t c = 0; c < m.size(); ++c) m[c] = std::max(m[c], v[c]);
    });
  }
  bool finite = true;
  for (size_t c = 0; c < m.size(); ++c) {
    finite = finite && scale_is_finite(m[c]);
    a.scales[c] = bits_float(m[c]);
  }
  return finite;
}

// Codes of one run [start, start + len) into codes[0, len). inv holds the
// factor L / s per channel (or one factor when !kPerChannel).
template <bool kPerChannel, bool kStochastic>
inline void quantize_run(const float* x, int64_t len, int64_t start, const float* inv, int64_t C, float top,
                         RngKey key, uint8_t* codes) {
  const uint32_t lo0 = uint32_t(uint64_t(start));
  const uint32_t hi0 = uint32_t(uint64_t(start) >> 32);
  for (int64_t j = 0, c = kPerChannel ? start % C : 0; j < len; c = 0) {
    const int64_t n = kPerChannel ? std::min(len - j, C - c) : len;
    const float* f = inv + c;
    const float* xj = x + j;
    uint8_t* out = codes + j;
    const uint32_t lo_j = lo0 + uint32_t(j);
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) {
      const float s = kPerChannel ? f[k] : f[0];
      if constexpr (kStochastic) {
        // The 64-bit element index, split once; the low word may wrap.
        const uint32_t lo = lo_j + uint32_t(k);
        const uint32_t hi = hi0 + (lo < lo0 ? 1u : 0u);
        out[k] = directq_code_stochastic(xj[k], s, top, counter_uniform(key, lo, hi));
      } else {
        out[k] = directq_code_nearest(xj[k], s, top);
      }
    }
    j += n;
  }
}

template <typename In, bool kPerChannel, bool kStochastic>
void quantize_all(const DirectQEncodeArgs& a, const std::vector<float>& inv) {
  const In* input = static_cast<const In*>(a.input);
  const float top = float(directq_levels(a.bits));
  const RngKey key = a.key;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, num_runs(a.numel), kGrainRuns),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      alignas(64) float buf[kRun];
                      alignas(64) uint8_t codes[kRun];
                      for (int64_t i = r.begin(); i != r.end(); ++i) {
                        const int64_t start = i * kRun;
                        const int64_t len = std::min(kRun, a.numel - start);
                        const float* x = cpu::load_floats(input, start, len, buf);
                        quantize_run<kPerChannel, kStochastic>(x, len, start, inv.data(), a.num_scales, top, key,
                                                               codes);
                        cpu::pack_codes(codes, len, a.bits, a.codes, start * a.bits);
                      }
                    });
}

template <typename In>
EncodeStatus encode_all(const DirectQEncodeArgs& a) {
  if (!reduce_scales<In>(a)) return EncodeStatus::kNonFinite;
  const int32_t levels = directq_levels(a.bits);
  std::vector<float> inv(size_t(a.num_scales));
  for (size_t c = 0; c < inv.size(); ++c) inv[c] = directq_inv_step(a.scales[c], levels);
  const bool per_channel = a.num_scales > 1;
  if (per_channel && a.stochastic) quantize_all<In, true, true>(a, inv);
  if (per_channel && !a.stochastic) quantize_all<In, true, false>(a, inv);
  if (!per_channel && a.stochastic) quantize_all<In, false, true>(a, inv);
  if (!per_channel && !a.stochastic) quantize_all<In, false, false>(a, inv);
  return EncodeStatus::kOk;
}

template <typename Out>
void decode_all(const DirectQDecodeArgs& a) {
  Out* output = static_cast<Out*>(a.output);
  const int32_t levels = directq_levels(a.bits);
  const int64_t C = a.num_scales;
  std::vector<float> step(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) step[size_t(c)] = directq_step(a.scales[c], levels);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, num_runs(a.numel), kGrainRuns),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      alignas(64) uint8_t codes[kRun];
                      alignas(64) float ybuf[kRun];
                      for (int64_t i = r.begin(); i != r.end(); ++i) {
                        const int64_t start = i * kRun;
                        const int64_t len = std::min(kRun, a.numel - start);
                        cpu::unpack_codes(a.codes, start * a.bits, len, a.bits, codes);
                        float* y = ybuf;
                        if constexpr (std::is_same_v<Out, float>) y = output + start;
                        if (C == 1) {
                          const float s0 = step[0];
#pragma omp simd
                          for (int64_t k = 0; k < len; ++k) y[k] = directq_value(codes[k], s0, levels);
                        } else {
                          for (int64_t j = 0, c = start % C; j < len; c = 0) {
                            const int64_t n = std::min(len - j, C - c);
                            const float* s = step.data() + c;
                            const uint8_t* q = codes + j;
                            float* yj = y + j;
#pragma omp simd
                            for (int64_t k = 0; k < n; ++k) yj[k] = directq_value(q[k], s[k], levels);
                            j += n;
                          }
                        }
                        if constexpr (!std::is_same_v<Out, float>) cpu::from_float(ybuf, len, output + start);
                      }
                    });
}

}  // namespace

EncodeStatus directq_encode_cpu(const DirectQEncodeArgs& args) {
  switch (args.input_type) {
    case FloatType::kFloat32: return encode_all<float>(args);
    case FloatType::kFloat16: return encode_all<Fp16In>(args);
    case FloatType::kBFloat16: return encode_all<Bf16In>(args);
  }
  return EncodeStatus::kOk;
}

void directq_decode_cpu(const DirectQDecodeArgs& args) {
  switch (args.output_type) {
    case FloatType::kFloat32: decode_all<float>(args); break;
    case FloatType::kFloat16: decode_all<Fp16In>(args); break;
    case FloatType::kBFloat16: decode_all<Bf16In>(args); break;
  }
}

}  // namespace actkit::kernels
