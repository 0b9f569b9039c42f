// CPU per-group quantization: TBB over groups, one group at a time in local
// buffers so every inner loop is a simple vectorizable pass.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "actkit/kernels/pergroup.h"
#include "actkit/kernels/pergroup_math.h"
#include "bitpack.h"
#include "float_io.h"

namespace actkit::kernels {
namespace {

// Groups per TBB task: big enough to amortize scheduling, small enough to
// balance (256 groups of 256 floats = 256 KiB of input).
constexpr int64_t kGrainGroups = 256;

using cpu::Bf16In;
using cpu::Fp16In;
using cpu::from_float;
using cpu::to_float;

// Encodes one group; returns kOk or the problem found.
inline EncodeStatus encode_group(const float* x, int64_t len, int bits, const PerGroupEncodeArgs& a,
                                 uint64_t first_index, uint16_t* meta, int64_t bit_pos, uint8_t* scratch) {
  const MetaFormat fmt = a.meta_format;
  float mn = std::numeric_limits<float>::infinity();
  float mx = -std::numeric_limits<float>::infinity();
  float poison = 0.0f;  // becomes NaN if any value is NaN or +-Inf
  // Selects on values, not std::min/max (which return references and keep
  // the loop scalar).
#pragma omp simd reduction(min : mn) reduction(max : mx) reduction(+ : poison)
  for (int64_t j = 0; j < len; ++j) {
    const float v = x[j];
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    poison += v * 0.0f;
  }
  GroupMeta gm;
  EncodeStatus problem = EncodeStatus::kOk;
  if (!(poison == 0.0f)) {
    problem = EncodeStatus::kNonFinite;
  } else if (!make_group_meta(mn, mx, bits, fmt, &gm)) {
    problem = EncodeStatus::kMetaOverflow;
  }
  if (problem != EncodeStatus::kOk) {
    if (!a.propagate_nonfinite) return problem;
    meta[0] = meta[1] = meta_nan(fmt);  // codes stay zero
    return EncodeStatus::kOk;
  }
  meta[0] = gm.zero_bits;
  meta[1] = gm.range_bits;

  const float top = float(max_code(bits));
  const float zero = gm.zero;
  const float scale = gm.scale;
  // Split the 64-bit element index once; the low word may wrap inside a group.
  const uint32_t lo0 = uint32_t(first_index);
  const uint32_t hi0 = uint32_t(first_index >> 32);
  const RngKey key = a.key;  // a local copy: stores to scratch cannot alias it
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t lo = lo0 + uint32_t(j);
    const uint32_t hi = hi0 + (lo < lo0 ? 1u : 0u);
    scratch[j] = quantize_value(x[j], zero, scale, counter_uniform(key, lo, hi), top);
  }
  cpu::pack_codes(scratch, len, bits, a.codes, bit_pos);
  return EncodeStatus::kOk;
}

template <typename In>
EncodeStatus encode_all(const PerGroupEncodeArgs& a) {
  const PerGroupLayout& L = a.layout;
  const int64_t gps = L.groups_per_sample();
  const In* input = static_cast<const In*>(a.input);
  std::atomic<int32_t> status{int32_t(EncodeStatus::kOk)};

  tbb::parallel_for(tbb::blocked_range<int64_t>(0, L.num_groups(), kGrainGroups),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      alignas(64) float xbuf[kMaxGroupSize];
                      alignas(64) uint8_t codes[kMaxGroupSize];
                      for (int64_t g = r.begin(); g != r.end(); ++g) {
                        const int64_t n = g / gps;
                        const int64_t gi = g - n * gps;
                        const int64_t start = gi * L.group_size;
                        const int64_t len = std::min<int64_t>(L.group_size, L.sample_size - start);
                        const int bits = L.bits(n);
                        const int64_t elem = n * L.sample_size + start;
                        const float* x;
                        if constexpr (std::is_same_v<In, float>) {
                          x = input + elem;
                        } else {
                          to_float(input + elem, len, xbuf);
                          x = xbuf;
                        }
                        const int64_t bit_pos = L.sample_bit_offset_of(n) + start * bits;
                        const EncodeStatus s =
                            encode_group(x, len, bits, a, uint64_t(elem), a.meta + 2 * g, bit_pos, codes);
                        if (s != EncodeStatus::kOk) {
                          int32_t expected = int32_t(EncodeStatus::kOk);
                          status.compare_exchange_strong(expected, int32_t(s));
                          return;
                        }
                      }
                    });
  return EncodeStatus(status.load());
}

template <typename Out>
void decode_all(const PerGroupDecodeArgs& a) {
  const PerGroupLayout& L = a.layout;
  const int64_t gps = L.groups_per_sample();
  Out* output = static_cast<Out*>(a.output);

  tbb::parallel_for(tbb::blocked_range<int64_t>(0, L.num_groups(), kGrainGroups),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      alignas(64) uint8_t codes[kMaxGroupSize];
                      alignas(64) float ybuf[kMaxGroupSize];
                      for (int64_t g = r.begin(); g != r.end(); ++g) {
                        const int64_t n = g / gps;
                        const int64_t gi = g - n * gps;
                        const int64_t start = gi * L.group_size;
                        const int64_t len = std::min<int64_t>(L.group_size, L.sample_size - start);
                        const int bits = L.bits(n);
                        const int64_t elem = n * L.sample_size + start;
                        cpu::unpack_codes(a.codes, L.sample_bit_offset_of(n) + start * bits, len, bits, codes);
                        const float zero = meta_to_float(a.meta[2 * g], a.meta_format);
                        const float step = dequant_step(a.meta[2 * g + 1], bits, a.meta_format);
                        float* y = ybuf;
                        if constexpr (std::is_same_v<Out, float>) y = output + elem;
#pragma omp simd
                        for (int64_t j = 0; j < len; ++j) y[j] = dequantize_value(codes[j], step, zero);
                        if constexpr (!std::is_same_v<Out, float>) from_float(ybuf, len, output + elem);
                      }
                    });
}

}  // namespace

EncodeStatus pergroup_encode_cpu(const PerGroupEncodeArgs& args) {
  switch (args.input_type) {
    case FloatType::kFloat32: return encode_all<float>(args);
    case FloatType::kFloat16: return encode_all<Fp16In>(args);
    case FloatType::kBFloat16: return encode_all<Bf16In>(args);
  }
  return EncodeStatus::kOk;
}

void pergroup_decode_cpu(const PerGroupDecodeArgs& args) {
  switch (args.output_type) {
    case FloatType::kFloat32: decode_all<float>(args); break;
    case FloatType::kFloat16: decode_all<Fp16In>(args); break;
    case FloatType::kBFloat16: decode_all<Bf16In>(args); break;
  }
}

}  // namespace actkit::kernels
