// CUDA per-group quantization: one thread block per group. The scalar math
// comes from pergroup_math.h, shared with the CPU kernels, so both produce
// the same codes and metadata for one seed.
#include <cuda_runtime.h>


#include "actkit/kernels/cuda.h"
#include "actkit/kernels/pergroup_math.h"

namespace actkit::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 1ll << 30;

struct Bf16In {
  uint16_t bits;
};
struct Fp16In {
  uint16_t bits;
};

__device__ __forceinline__ float load_value(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_value(const Bf16In* p, int64_t i) { return bf16_to_float(p[i].bits); }
__device__ __forceinline__ float load_value(const Fp16In* p, int64_t i) { return fp16_to_float(p[i].bits); }

__device__ __forceinline__ void store_value(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_value(Bf16In* p, int64_t i, float v) { p[i].bits = float_to_bf16_rne(v); }
__device__ __forceinline__ void store_value(Fp16In* p, int64_t i, float v) { p[i].bits = float_to_fp16_rne(v); }

// Location of group g in the input and in the code stream.
struct GroupPos {
  int64_t sample;
  int64_t start;  // first value inside the sample
  int64_t len;
  int bits;
  int64_t elem;     // flat index of the first value
  int64_t bit_pos;  // stream bit of the first code
};

__device__ __forceinline__ GroupPos locate(const PerGroupLayout& L, int64_t g) {
  GroupPos p;
  const int64_t gps = L.groups_per_sample();
  p.sample = g / gps;
  p.start = (g - p.sample * gps) * L.group_size;
  p.len = min(int64_t(L.group_size), L.sample_size - p.start);
  p.bits = L.bits(p.sample);
  p.elem = p.sample * L.sample_size + p.start;
  p.bit_pos = L.sample_bit_offset_of(p.sample) + p.start * p.bits;
  return p;
}

// Reduces (min, max, any-bad) over the block; every thread gets the result.
__device__ void block_minmax(float& mn, float& mx, int& bad) {
  __shared__ float s_min[kWarps];
  __shared__ float s_max[kWarps];
  __shared__ int s_bad[kWarps];
  for (int off = 16; off > 0; off >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    bad |= __shfl_xor_sync(0xffffffffu, bad, off);
  }
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) {
    s_min[warp] = mn;
    s_max[warp] = mx;
    s_bad[warp] = bad;
  }
  __syncthreads();
  mn = s_min[0];
  mx = s_max[0];
  bad = s_bad[0];
  for (int w = 1; w < kWarps; ++w) {
    mn = fminf(mn, s_min[w]);
    mx = fmaxf(mx, s_max[w]);
    bad |= s_bad[w];
  }
  __syncthreads();  // s_* may be reused by the next group
}

__device__ __forceinline__ void record_status(int32_t* status, EncodeStatus s) {
  atomicCAS(status, int32_t(EncodeStatus::kOk), int32_t(s));
}

// ORs the bits of output byte `byte` into the stream; bytes the group shares
// with a neighbour go through a 32-bit atomic on the containing word.
__device__ __forceinline__ void write_stream_byte(uint8_t* out, int64_t byte, uint32_t v, bool shared) {
  if (shared) {
    if (v == 0) return;
    unsigned int* word = reinterpret_cast<unsigned int*>(out + (byte & ~int64_t(3)));
    atomicOr(word, v << (8 * (byte & 3)));
  } else {
    out[byte] = uint8_t(v);
  }
}

// Assembles output byte `byte` from the codes in shared memory; codes[k]
// starts at stream bit bit_pos + k*bits.
__device__ __forceinline__ uint32_t gather_byte(const uint8_t* codes, int64_t len, int bits, int64_t bit_pos,
                                                int64_t byte) {
  const int64_t lo = max(byte * 8, bit_pos);
  const int64_t hi = min(byte * 8 + 8, bit_pos + len * bits);
  uint32_t v = 0;
  for (int64_t k = (lo - bit_pos) / bits; bit_pos + k * bits < hi; ++k) {
    const int64_t shift = bit_pos + k * bits - byte * 8;
    const uint32_t c = codes[k];
    v |= shift >= 0 ? (c << shift) : (c >> -shift);
  }
  return v & 0xffu;
}

template <typename In>
__global__ void __launch_bounds__(kThreads) encode_kernel(PerGroupEncodeArgs a, int32_t* status) {
  __shared__ uint8_t codes[kMaxGroupSize];
  __shared__ GroupMeta s_meta;
  __shared__ bool s_problem;
  const PerGroupLayout& L = a.layout;
  const In* input = static_cast<const In*>(a.input);
  const int64_t ng = L.num_groups();

  for (int64_t g = blockIdx.x; g < ng; g += gridDim.x) {
    const GroupPos p = locate(L, g);
    const In* x = input + p.elem;

    float mn = __int_as_float(0x7f800000);  // +inf
    float mx = -mn;
    int bad = 0;
    for (int64_t j = threadIdx.x; j < p.len; j += kThreads) {
      const float v = load_value(x, j);
      bad |= !isfinite(v);
      mn = fminf(mn, v);
      mx = fmaxf(mx, v);
    }
    block_minmax(mn, mx, bad);
    if (threadIdx.x == 0) {
      GroupMeta gm;
      EncodeStatus problem = EncodeStatus::kOk;
      if (bad) {
        problem = EncodeStatus::kNonFinite;
      } else if (!make_group_meta(mn, mx, p.bits, a.meta_format, &gm)) {
        problem = EncodeStatus::kMetaOverflow;
      }
      if (problem != EncodeStatus::kOk) {
        if (!a.propagate_nonfinite) record_status(status, problem);
        gm.zero_bits = gm.range_bits = meta_nan(a.meta_format);
      }
      a.meta[2 * g] = gm.zero_bits;
      a.meta[2 * g + 1] = gm.range_bits;
      s_problem = problem != EncodeStatus::kOk;
      s_meta = gm;
    }
    __syncthreads();
    if (s_problem) {
      __syncthreads();
      continue;  // uniform across the block; the group's codes stay zero
    }

    const float top = float(max_code(p.bits));
    const float zero = s_meta.zero;
    const float scale = s_meta.scale;
    for (int64_t j = threadIdx.x; j < p.len; j += kThreads) {
      const float u = counter_uniform(a.key, uint64_t(p.elem + j));
      codes[j] = quantize_value(load_value(x, j), zero, scale, u, top);
    }
    __syncthreads();

    const int64_t bit_end = p.bit_pos + p.len * p.bits;
    const int64_t first = p.bit_pos >> 3;
    const int64_t last = (bit_end + 7) >> 3;  // exclusive
    for (int64_t b = first + threadIdx.x; b < last; b += kThreads) {
      const bool shared = (b * 8 < p.bit_pos) || (b * 8 + 8 > bit_end);
      write_stream_byte(a.codes, b, gather_byte(codes, p.len, p.bits, p.bit_pos, b), shared);
    }
    __syncthreads();  // codes[] and s_meta are reused by the next group
  }
}

template <typename Out>
__global__ void __launch_bounds__(kThreads) decode_kernel(PerGroupDecodeArgs a) {
  const PerGroupLayout& L = a.layout;
  Out* output = static_cast<Out*>(a.output);
  const int64_t ng = L.num_groups();
  for (int64_t g = blockIdx.x; g < ng; g += gridDim.x) {
    const GroupPos p = locate(L, g);
    const float zero = meta_to_float(a.meta[2 * g], a.meta_format);
    const float step = dequant_step(a.meta[2 * g + 1], p.bits, a.meta_format);
    const uint32_t mask = max_code(p.bits);
    for (int64_t j = threadIdx.x; j < p.len; j += kThreads) {
      const int64_t bit = p.bit_pos + j * p.bits;
      const int shift = int(bit & 7);
      uint32_t v = uint32_t(a.codes[bit >> 3]) >> shift;
      if (shift + p.bits > 8) v |= uint32_t(a.codes[(bit >> 3) + 1]) << (8 - shift);
      store_value(output, p.elem + j, dequantize_value(v & mask, step, zero));
    }
  }
}

unsigned grid_for(int64_t groups) { return unsigned(groups < kMaxBlocks ? groups : kMaxBlocks); }

}  // namespace

cudaError_t pergroup_encode_cuda(const PerGroupEncodeArgs& args, int32_t* status, cudaStream_t stream) {
  const int64_t ng = args.layout.num_groups();
  if (ng == 0) return cudaSuccess;
  const unsigned grid = grid_for(ng);
  switch (args.input_type) {
    case FloatType::kFloat32: encode_kernel<float><<<grid, kThreads, 0, stream>>>(args, status); break;
    case FloatType::kFloat16: encode_kernel<Fp16In><<<grid, kThreads, 0, stream>>>(args, status); break;
    case FloatType::kBFloat16: encode_kernel<Bf16In><<<grid, kThreads, 0, stream>>>(args, status); break;
  }
  return cudaGetLastError();
}

cudaError_t pergroup_decode_cuda(const PerGroupDecodeArgs& args, cudaStream_t stream) {
  const int64_t ng = args.layout.num_groups();
  if (ng == 0) return cudaSuccess;
  const unsigned grid = grid_for(ng);
  switch (args.output_type) {
    case FloatType::kFloat32: decode_kernel<float><<<grid, kThreads, 0, stream>>>(args); break;
    case FloatType::kFloat16: decode_kernel<Fp16In><<<grid, kThreads, 0, stream>>>(args); break;
    case FloatType::kBFloat16: decode_kernel<Bf16In><<<grid, kThreads, 0, stream>>>(args); break;
  }
  return cudaGetLastError();
}

}  // namespace actkit::kernels
