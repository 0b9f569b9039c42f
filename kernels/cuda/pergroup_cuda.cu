// CUDA per-group quantization: one warp per group, eight warps per block.
// A group is a few hundred values (256 by default), so a warp reduces its
// min and max with shuffles alone -- no shared memory, no block barriers --
// and every lane quantizes eight consecutive values into `bits` whole bytes
// of the stream. The scalar math comes from pergroup_math.h, shared with the
// CPU kernels, so both produce the same codes and metadata for one seed.
#include <cuda_runtime.h>

#include "actkit/kernels/cuda.h"
#include "actkit/kernels/pergroup_math.h"
#include "float_io.cuh"  // the element I/O every kernel here shares

namespace actkit::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kCodesPerLane = 8;  // eight codes of b bits are b whole bytes
constexpr int64_t kMaxBlocks = 1ll << 30;
constexpr unsigned kFullMask = 0xffffffffu;

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

// Reduces (min, max, any-bad) over the warp; every lane gets the result.
__device__ __forceinline__ void warp_minmax(float& mn, float& mx, int& bad) {
  for (int off = 16; off > 0; off >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(kFullMask, mn, off));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
    bad |= __shfl_xor_sync(kFullMask, bad, off);
  }
}

__device__ __forceinline__ void record_status(int32_t* status, EncodeStatus s) {
  atomicCAS(status, int32_t(EncodeStatus::kOk), int32_t(s));
}

// ORs the bits of output byte `byte` into the stream; a byte that another
// writer also has bits in (a neighbouring group's, or a neighbouring lane's
// when the group does not start on a byte) goes through a 32-bit atomic on
// the containing word.
__device__ __forceinline__ void write_stream_byte(uint8_t* out, int64_t byte, uint32_t v, bool shared) {
  if (shared) {
    if (v == 0) return;
    unsigned int* word = reinterpret_cast<unsigned int*>(out + (byte & ~int64_t(3)));
    atomicOr(word, v << (8 * (byte & 3)));
  } else {
    out[byte] = uint8_t(v);
  }
}

// Writes the low `nbits` (<= 64) bits of `v` to stream bits
// [bit, bit + nbits), LSB first. Only the first and last byte can hold bits
// of another writer.
__device__ __forceinline__ void write_bits(uint8_t* out, int64_t bit, uint64_t v, int nbits) {
  const int shift = int(bit & 7);
  const uint64_t lo = v << shift;
  const uint64_t hi = shift != 0 ? v >> (64 - shift) : 0;  // bits pushed past 64 by the shift
  const int64_t first = bit >> 3;
  const int64_t end_bit = bit + nbits;
  const int bytes = int(((end_bit + 7) >> 3) - first);
  for (int i = 0; i < bytes; ++i) {
    const uint32_t byte = uint32_t((i < 8 ? lo >> (8 * i) : hi >> (8 * (i - 8))) & 0xffu);
    const bool shared = (i == 0 && shift != 0) || (i == bytes - 1 && (end_bit & 7) != 0);
    write_stream_byte(out, first + i, byte, shared);
  }
}

template <typename In>
__global__ void __launch_bounds__(kThreads) encode_kernel(PerGroupEncodeArgs a, int32_t* status) {
  const PerGroupLayout& L = a.layout;
  const In* input = static_cast<const In*>(a.input);
  const int64_t ng = L.num_groups();
  const int lane = int(threadIdx.x & 31);
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;

  for (int64_t g = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; g < ng; g += warps) {
    const GroupPos p = locate(L, g);
    const In* x = input + p.elem;

    float mn = __int_as_float(0x7f800000);  // +inf
    float mx = -mn;
    int bad = 0;
    for (int64_t j = lane; j < p.len; j += 32) {  // coalesced
      const float v = load_value(x, j);
      bad |= !isfinite(v);
      mn = fminf(mn, v);
      mx = fmaxf(mx, v);
    }
    warp_minmax(mn, mx, bad);
    // Every lane derives the same metadata from the same min and max.
    GroupMeta gm;
    EncodeStatus problem = EncodeStatus::kOk;
    if (bad) {
      problem = EncodeStatus::kNonFinite;
    } else if (!make_group_meta(mn, mx, p.bits, a.meta_format, &gm)) {
      problem = EncodeStatus::kMetaOverflow;
    }
    if (problem != EncodeStatus::kOk) gm.zero_bits = gm.range_bits = meta_nan(a.meta_format);
    if (lane == 0) {
      if (problem != EncodeStatus::kOk && !a.propagate_nonfinite) record_status(status, problem);
      a.meta[2 * g] = gm.zero_bits;
      a.meta[2 * g + 1] = gm.range_bits;
    }
    if (problem != EncodeStatus::kOk) continue;  // uniform across the warp; the group's codes stay zero

    const float top = float(max_code(p.bits));
    // Lane l packs codes [c + 8l, c + 8l + 8) of each stretch of 256.
    for (int64_t k = int64_t(lane) * kCodesPerLane; k < p.len; k += 32 * kCodesPerLane) {
      const int n = int(min(int64_t(kCodesPerLane), p.len - k));
      uint64_t packed = 0;
#pragma unroll
      for (int i = 0; i < kCodesPerLane; ++i) {
        if (i < n) {
          const float u = counter_uniform(a.key, uint64_t(p.elem + k + i));
          packed |= uint64_t(quantize_value(load_value(x, k + i), gm.zero, gm.scale, u, top)) << (i * p.bits);
        }
      }
      write_bits(a.codes, p.bit_pos + k * p.bits, packed, n * p.bits);
    }
  }
}

template <typename Out>
__global__ void __launch_bounds__(kThreads) decode_kernel(PerGroupDecodeArgs a) {
  const PerGroupLayout& L = a.layout;
  Out* output = static_cast<Out*>(a.output);
  const int64_t ng = L.num_groups();
  const int lane = int(threadIdx.x & 31);
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t g = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; g < ng; g += warps) {
    const GroupPos p = locate(L, g);
    const float zero = meta_to_float(a.meta[2 * g], a.meta_format);
    const float step = dequant_step(a.meta[2 * g + 1], p.bits, a.meta_format);
    const uint32_t mask = max_code(p.bits);
    for (int64_t j = lane; j < p.len; j += 32) {  // coalesced stores; lanes share code bytes
      const int64_t bit = p.bit_pos + j * p.bits;
      const int shift = int(bit & 7);
      uint32_t v = uint32_t(a.codes[bit >> 3]) >> shift;
      if (shift + p.bits > 8) v |= uint32_t(a.codes[(bit >> 3) + 1]) << (8 - shift);
      store_value(output, p.elem + j, dequantize_value(v & mask, step, zero));
    }
  }
}

// Blocks for one warp per group.
unsigned grid_for(int64_t groups) {
  const int64_t blocks = (groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

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
