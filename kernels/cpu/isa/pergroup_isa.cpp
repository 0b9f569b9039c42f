// Per-group quantization over a range of groups, one group at a time in
// local buffers so every inner loop is a simple vectorizable pass.
#include <cstdint>
#include <limits>

#include "actkit/kernels/pergroup_math.h"
#include "bitpack.h"
#include "float_io.h"
#include "isa_functions.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

using cpu::Bf16In;
using cpu::Fp16In;

// Extremes and the non-finite check of one group.
struct GroupExtremes {
  float mn;
  float mx;
  uint32_t non_finite;  // nonzero if any value is NaN or +-Inf
};

ACTKIT_CPU_INLINE GroupExtremes group_extremes(const float* x, int64_t len) {
  float mn = std::numeric_limits<float>::infinity();
  float mx = -std::numeric_limits<float>::infinity();
  uint32_t non_finite = 0;
  // Selects on values, not std::min/max (which return references and keep
  // the loop scalar). The non-finite test is an integer OR on the exponent
  // bits: a float sum (v * 0 is NaN for NaN and Inf) would end each group
  // with a chain of scalar adds, one per lane.
#pragma omp simd reduction(min : mn) reduction(max : mx) reduction(| : non_finite)
  for (int64_t j = 0; j < len; ++j) {
    const float v = x[j];
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    non_finite |= (float_bits(v) & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
  }
  return GroupExtremes{mn, mx, non_finite};
}

// Group g's sample and its index within the sample, for consecutive g.
struct SamplePosition {
  SamplePosition(int64_t g, int64_t groups_per_sample)
      : sample(g / groups_per_sample), group(g - sample * groups_per_sample), per_sample(groups_per_sample) {}
  void next() {
    if (++group == per_sample) {
      group = 0;
      ++sample;
    }
  }
  int64_t sample;
  int64_t group;
  int64_t per_sample;
};

// Codes of `len` values whose counters are lo0, lo0 + 1, ... under one high
// word (mix = counter_high_mix of it): the low word must not wrap inside the
// run. A 32-bit index keeps the loop in 32-bit lanes; a 64-bit one cost 16
// vector adds and 4 permutes per 64 values to narrow it, and the per-value
// wrap test a compare and a blend.
ACTKIT_CPU_INLINE void quantize_run(const float* x, uint32_t len, uint32_t k0, uint32_t lo0, uint32_t mix, float zero,
                                    float scale, float top, uint8_t* out) {
#pragma omp simd
  for (uint32_t j = 0; j < len; ++j) {
    const uint32_t h = counter_hash_mixed(k0, lo0 + j, mix);
    out[j] = quantize_value(x[j], zero, scale, counter_bits_to_uniform(h), top);
  }
}

// Codes of one group into scratch, then packed at stream bit bit_pos.
ACTKIT_CPU_INLINE void quantize_group(const float* x, int64_t len, int bits, const GroupMeta& gm, RngKey key,
                                      uint64_t first_index, uint8_t* codes, int64_t bit_pos, uint8_t* scratch) {
  const float top = float(max_code(bits));
  // The 64-bit element index split once; the group is cut where its low
  // word wraps (at most once: len <= kMaxGroupSize) into two runs, each under
  // one high word.
  const uint32_t lo0 = uint32_t(first_index);
  const uint32_t hi0 = uint32_t(first_index >> 32);
  const uint32_t first = uint32_t(counters_before_wrap(first_index, len));
  quantize_run(x, first, key.k0, lo0, counter_high_mix(key, hi0), gm.zero, gm.scale, top, scratch);
  if (first < len) {
    quantize_run(x + first, uint32_t(len - first), key.k0, 0u, counter_high_mix(key, hi0 + 1u), gm.zero, gm.scale, top,
                 scratch + first);
  }
  cpu::pack_codes(scratch, len, bits, codes, bit_pos);
}

// Groups are encoded a chunk at a time (at most kMaxGroupSize values): the
// extremes of every group first, then their metadata, whose scalar chains
// (directed rounding, one division) are independent across groups and
// overlap, then the codes. Four groups of 256 measured best on the build
// machine (2-bit encode 11.1-11.2 GB/s against 10.7 for one group at a time
// and 9.6-10.2 for sixteen, whose 16 KiB stop fitting beside the scratch).
constexpr int64_t kChunkGroups = 4;

template <typename In>
EncodeStatus encode_groups(const PerGroupEncodeArgs& a, int64_t g0, int64_t g1) {
  if (g0 >= g1) return EncodeStatus::kOk;
  const PerGroupLayout& L = a.layout;
  const int64_t gps = L.groups_per_sample();
  const In* input = static_cast<const In*>(a.input);
  const MetaFormat fmt = a.meta_format;
  const RngKey key = a.key;  // a local copy: stores to scratch cannot alias it
  const int64_t fit = kMaxGroupSize / L.group_size;  // groups whose 16-bit inputs fit xbuf
  const int64_t chunk = fit < 1 ? 1 : (fit < kChunkGroups ? fit : kChunkGroups);
  alignas(64) float xbuf[kMaxGroupSize];
  alignas(64) uint8_t scratch[kMaxGroupSize];
  GroupExtremes ext[kChunkGroups];
  GroupMeta gm[kChunkGroups];
  // The sample of group g and the group's place in it, advanced group by
  // group: one division per range, not one per group (a 64-bit division
  // costs 40-90 cycles on a Cascade Lake Xeon, a fifth of a group's codes).
  SamplePosition pos(g0, gps);
  // The element after the range's last group: prefetches stay inside it.
  const SamplePosition last(g1 - 1, gps);
  const int64_t last_start = last.group * L.group_size;
  const int64_t end_elem = last.sample * L.sample_size + last_start +
                           (L.sample_size - last_start < L.group_size ? L.sample_size - last_start : L.group_size);
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t c1 = c0 + chunk < g1 ? c0 + chunk : g1;
    // The next chunk's values (groups are consecutive in memory), a group's
    // worth beside each group's codes.
    const int64_t next = pos.sample * L.sample_size + pos.group * L.group_size + chunk * L.group_size;
    cpu::Prefetcher prefetch =
        next < end_elem
            ? cpu::prefetch_values(input, next, chunk * L.group_size < end_elem - next ? chunk * L.group_size : end_elem - next)
            : cpu::Prefetcher();
    const float* xs[kChunkGroups];
    int64_t lens[kChunkGroups];
    int64_t samples[kChunkGroups];
    int64_t starts[kChunkGroups];  // the group's first value within its sample
    for (int64_t g = c0; g < c1; ++g, pos.next()) {
      const int64_t i = g - c0;
      samples[i] = pos.sample;
      starts[i] = pos.group * L.group_size;
      const int64_t left = L.sample_size - starts[i];
      lens[i] = left < L.group_size ? left : L.group_size;
      xs[i] = cpu::load_floats(input, samples[i] * L.sample_size + starts[i], lens[i], xbuf + i * L.group_size);
      ext[i] = group_extremes(xs[i], lens[i]);
    }
    for (int64_t g = c0; g < c1; ++g) {
      const int64_t i = g - c0;
      const int bits = L.bits(samples[i]);
      EncodeStatus problem = EncodeStatus::kOk;
      if (ext[i].non_finite != 0) {
        problem = EncodeStatus::kNonFinite;
      } else if (!make_group_meta(ext[i].mn, ext[i].mx, bits, fmt, &gm[i])) {
        problem = EncodeStatus::kMetaOverflow;
      }
      if (problem != EncodeStatus::kOk) {
        if (!a.propagate_nonfinite) return problem;
        a.meta[2 * g] = a.meta[2 * g + 1] = meta_nan(fmt);  // codes stay zero
        lens[i] = 0;
        continue;
      }
      a.meta[2 * g] = gm[i].zero_bits;
      a.meta[2 * g + 1] = gm[i].range_bits;
    }
    for (int64_t g = c0; g < c1; ++g) {
      const int64_t i = g - c0;
      prefetch.advance(L.group_size * int64_t(sizeof(In)));
      if (lens[i] == 0) continue;
      const int64_t n = samples[i];
      const int bits = L.bits(n);
      const int64_t bit_pos = L.sample_bit_offset_of(n) + starts[i] * bits;
      quantize_group(xs[i], lens[i], bits, gm[i], key, uint64_t(n * L.sample_size + starts[i]), a.codes, bit_pos,
                     scratch);
    }
  }
  return EncodeStatus::kOk;
}

template <typename Out>
void decode_groups(const PerGroupDecodeArgs& a, int64_t g0, int64_t g1) {
  if (g0 >= g1) return;
  const PerGroupLayout& L = a.layout;
  const int64_t gps = L.groups_per_sample();
  Out* output = static_cast<Out*>(a.output);
  alignas(64) uint8_t codes[kMaxGroupSize];
  alignas(64) float ybuf[kMaxGroupSize];
  SamplePosition pos(g0, gps);
  for (int64_t g = g0; g != g1; ++g, pos.next()) {
    const int64_t n = pos.sample;
    const int64_t start = pos.group * L.group_size;
    const int64_t left = L.sample_size - start;
    const int64_t len = left < L.group_size ? left : L.group_size;
    const int bits = L.bits(n);
    const int64_t elem = n * L.sample_size + start;
    cpu::unpack_codes(a.codes, L.sample_bit_offset_of(n) + start * bits, len, bits, codes);
    const float zero = meta_to_float(a.meta[2 * g], a.meta_format);
    const float step = dequant_step(a.meta[2 * g + 1], bits, a.meta_format);
    float* y = cpu::is_float_v<Out> ? reinterpret_cast<float*>(output + elem) : ybuf;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) y[j] = dequantize_value(codes[j], step, zero);
    if constexpr (!cpu::is_float_v<Out>) cpu::from_float(ybuf, len, output + elem);
  }
}

}  // namespace

EncodeStatus pergroup_encode(const PerGroupEncodeArgs& a, int64_t g0, int64_t g1) {
  switch (a.input_type) {
    case FloatType::kFloat32: return encode_groups<float>(a, g0, g1);
    case FloatType::kFloat16: return encode_groups<Fp16In>(a, g0, g1);
    case FloatType::kBFloat16: return encode_groups<Bf16In>(a, g0, g1);
  }
  return EncodeStatus::kOk;
}

void pergroup_decode(const PerGroupDecodeArgs& a, int64_t g0, int64_t g1) {
  switch (a.output_type) {
    case FloatType::kFloat32: decode_groups<float>(a, g0, g1); break;
    case FloatType::kFloat16: decode_groups<Fp16In>(a, g0, g1); break;
    case FloatType::kBFloat16: decode_groups<Bf16In>(a, g0, g1); break;
  }
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
