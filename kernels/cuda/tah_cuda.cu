// CUDA TAH-Quant: one warp per token for the entropies, one warp per tile
// for encode and decode (a tile is at most 256 values: 8 per lane), the
// tile held in shared memory while it is transformed. Token sums follow
// the lane order of tah_math.h and every rounding goes through its _rn
// helpers, so the payload equals the CPU kernel's bit for bit.
#include <cuda_runtime.h>

#include "actkit/kernels/cuda.h"
#include "actkit/kernels/tah_math.h"
#include "float_io.cuh"  // the element I/O every kernel here shares

namespace actkit::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kCodesPerLane = 8;  // eight codes of b bits are b whole bytes
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRankThreads = 1024;

__device__ __forceinline__ void record_status(int32_t* status, EncodeStatus s) {
  atomicCAS(status, int32_t(EncodeStatus::kOk), int32_t(s));
}

// The butterfly of tah_lane_total: lane l adds lane l ^ d's value.
__device__ __forceinline__ float lane_total(float v) {
  for (int d = kTahLanes / 2; d > 0; d >>= 1) v = add_rn(v, __shfl_xor_sync(kFullMask, v, d));
  return v;
}

unsigned grid_for_warps(int64_t items) {
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return unsigned(blocks < (int64_t(1) << 30) ? (blocks > 0 ? blocks : 1) : (int64_t(1) << 30));
}

template <typename In>
__global__ void __launch_bounds__(kThreads) entropy_kernel(const In* x, int64_t T, int64_t C, float* entropy,
                                                           int32_t* status) {
  const int lane = int(threadIdx.x & 31);
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; t < T; t += warps) {
    const In* a = x + t * C;
    float l1 = 0.0f;
    int bad = 0;
    for (int64_t c = lane; c < C; c += 32) {
      const float v = load_value(a, c);
      bad |= !isfinite(v);
      l1 = add_rn(l1, abs_rn(v));
    }
    l1 = lane_total(l1);
    for (int d = 16; d > 0; d >>= 1) bad |= __shfl_xor_sync(kFullMask, bad, d);
    if (bad) {
      if (lane == 0) record_status(status, EncodeStatus::kNonFinite);
      continue;  // uniform across the warp
    }
    const float inv_l1 = tah_inv_l1(l1);
    float sum = 0.0f;
    for (int64_t c = lane; c < C; c += 32) sum = add_rn(sum, tah_entropy_term(load_value(a, c), inv_l1));
    sum = lane_total(sum);
    if (lane == 0) entropy[t] = tah_entropy_from_sum(sum);
  }
}

// One thread per map byte, from one flag byte per token.
__global__ void pack_map_kernel(const uint8_t* token_high, int64_t T, uint8_t* map) {
  const int64_t bytes = (T + 7) / 8;
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < bytes; b += int64_t(gridDim.x) * blockDim.x) {
    uint32_t v = 0;
    for (int64_t t = 8 * b; t < min(T, 8 * b + 8); ++t) v |= uint32_t(token_high[t] != 0) << (t - 8 * b);
    map[b] = uint8_t(v);
  }
}

// Exclusive popcount prefix of the map words (entry W = total), in one
// block: each thread sums a contiguous run of words, a shared-memory scan
// gives each run its start.
__global__ void __launch_bounds__(kRankThreads) word_ranks_kernel(const uint64_t* map, int64_t W, int64_t* ranks) {
  __shared__ int64_t sums[kRankThreads];
  const int64_t per = (W + kRankThreads - 1) / kRankThreads;
  const int64_t w0 = min(W, int64_t(threadIdx.x) * per);
  const int64_t w1 = min(W, w0 + per);
  int64_t mine = 0;
  for (int64_t w = w0; w < w1; ++w) mine += popcount64(map[w]);
  sums[threadIdx.x] = mine;
  __syncthreads();
  for (int d = 1; d < kRankThreads; d *= 2) {  // inclusive Hillis-Steele scan
    const int64_t add = threadIdx.x >= d ? sums[threadIdx.x - d] : 0;
    __syncthreads();
    sums[threadIdx.x] += add;
    __syncthreads();
  }
  int64_t run = sums[threadIdx.x] - mine;
  for (int64_t w = w0; w < w1; ++w) {
    ranks[w] = run;
    run += popcount64(map[w]);
  }
  if (threadIdx.x == kRankThreads - 1) ranks[W] = sums[threadIdx.x];
}

// The warp's normalized Hadamard transform of y[0, g) in shared memory:
// the butterflies of tah_hadamard, a stage at a time.
__device__ __forceinline__ void warp_hadamard(float* y, int g, int lane) {
  for (int64_t h = 1; h < g; h *= 2) {
    __syncwarp();
    for (int64_t p = lane; p < g / 2; p += 32) {
      const int64_t i = tah_butterfly_index(p, h);
      tah_butterfly(y, i, i + h);
    }
  }
  __syncwarp();
  const float norm = tah_hadamard_norm(g);
  for (int k = lane; k < g; k += 32) y[k] = mul_rn(y[k], norm);
  __syncwarp();
}

template <typename In>
__global__ void __launch_bounds__(kThreads) encode_tiles_kernel(TahEncodeArgs a, const int64_t* ranks,
                                                                int32_t* status) {
  __shared__ float smem[kWarpsPerBlock][kTahMaxGroupSize];
  const TahLayout& L = a.layout;
  const In* input = static_cast<const In*>(a.input);
  const int g = L.group_size;
  const int64_t K = L.tiles_per_token();
  const int64_t tiles = L.num_tiles();
  const uint64_t* map = reinterpret_cast<const uint64_t*>(a.payload + L.map_offset());
  uint16_t* params = reinterpret_cast<uint16_t*>(a.payload + L.params_offset());
  unsigned int* flags = reinterpret_cast<unsigned int*>(a.payload + L.flags_offset());
  const int lane = int(threadIdx.x & 31);
  float* y = smem[threadIdx.x / 32];
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;

  for (int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; i < tiles; i += warps) {
    const int64_t t = i / K;
    const int64_t j = i - t * K;
    const In* x = input + t * L.channels + j * g;
    __syncwarp();  // the previous tile's reads of y are done
    // Largest magnitude and its first index: lanes scan their values in
    // increasing order, then ties go to the lower index.
    float a1 = -1.0f;
    int d = g;
    for (int k = lane; k < g; k += 32) {
      const float v = load_value(x, k);
      y[k] = v;
      if (abs_rn(v) > a1) {
        a1 = abs_rn(v);
        d = k;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float oa = __shfl_xor_sync(kFullMask, a1, off);
      const int od = __shfl_xor_sync(kFullMask, d, off);
      if (oa > a1 || (oa == a1 && od < d)) {
        a1 = oa;
        d = od;
      }
    }
    bool outlier = false;
    if (a.hadamard) {
      float a2 = 0.0f;
      for (int k = lane; k < g; k += 32) a2 = fmaxf(a2, k == d ? 0.0f : abs_rn(y[k]));
      for (int off = 16; off > 0; off >>= 1) a2 = fmaxf(a2, __shfl_xor_sync(kFullMask, a2, off));
      outlier = tah_is_outlier(a1, a2, a.tau);
    }
    if (outlier) {  // uniform across the warp
      __syncwarp();
      if (lane == 0) {
        const float first = y[0];
        y[0] = y[d];
        y[d] = first;
      }
      warp_hadamard(y, g, lane);
    }
    __syncwarp();
    float mn = y[0];
    float mx = y[0];
    bool non_finite = false;
    for (int k = lane; k < g; k += 32) {
      mn = fminf(mn, y[k]);
      mx = fmaxf(mx, y[k]);
      non_finite |= !isfinite(y[k]);
    }
    for (int off = 16; off > 0; off >>= 1) {
      mn = fminf(mn, __shfl_xor_sync(kFullMask, mn, off));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
    }
    // Finite inputs near FLT_MAX can overflow in the butterflies (Inf, or
    // NaN where two meet), which fminf/fmaxf would skip: unbounded extremes
    // make tah_tile_params refuse the tile, as the CPU kernel does.
    if (__any_sync(kFullMask, non_finite)) {
      mn = -INFINITY;
      mx = INFINITY;
    }
    const TahTokenBits tb = tah_token_bits(map, ranks, t, L.high_tokens);
    const int bits = tb.high ? L.high_bits : L.low_bits;
    TahTileParams p;
    if (!tah_tile_params(mn, mx, bits, &p)) {
      if (lane == 0) record_status(status, EncodeStatus::kMetaOverflow);
      continue;
    }
    if (lane == 0) {
      params[2 * i] = p.zero_bits;
      params[2 * i + 1] = p.scale_bits;
      a.payload[L.pivots_offset() + i] = uint8_t(outlier ? d : 0);
      if (outlier) atomicOr(flags + i / 32, 1u << (i % 32));  // little-endian: bit i of the section
    }
    const float top = float((1u << bits) - 1u);
    uint8_t* codes = a.payload + L.token_codes_offset(t, tb.rank) + j * g * bits / 8;
    for (int k0 = lane * kCodesPerLane; k0 < g; k0 += 32 * kCodesPerLane) {
      uint64_t packed = 0;
#pragma unroll
      for (int k = 0; k < kCodesPerLane; ++k) {
        const float v = y[k0 + k];
        const uint8_t q =
            a.stochastic ? tah_code_stochastic(v, p.zero, p.inv_scale, top,
                                               counter_uniform(a.key, uint64_t(t * L.channels + j * g + k0 + k)))
                         : tah_code(v, p.zero, p.inv_scale, top);
        packed |= uint64_t(q) << (k * bits);
      }
      uint8_t* out = codes + k0 * bits / 8;
      for (int b = 0; b < bits; ++b) out[b] = uint8_t(packed >> (8 * b));
    }
  }
}

template <typename Out>
__global__ void __launch_bounds__(kThreads) decode_kernel(TahDecodeArgs a, const int64_t* ranks) {
  __shared__ float smem[kWarpsPerBlock][kTahMaxGroupSize];
  const TahLayout& L = a.layout;
  Out* output = static_cast<Out*>(a.output);
  const int g = L.group_size;
  const int64_t K = L.tiles_per_token();
  const int64_t tiles = L.num_tiles();
  const uint64_t* map = reinterpret_cast<const uint64_t*>(a.payload + L.map_offset());
  const uint16_t* params = reinterpret_cast<const uint16_t*>(a.payload + L.params_offset());
  const uint8_t* flags = a.payload + L.flags_offset();
  const int lane = int(threadIdx.x & 31);
  float* y = smem[threadIdx.x / 32];
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;

  for (int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; i < tiles; i += warps) {
    const int64_t t = i / K;
    const int64_t j = i - t * K;
    const TahTokenBits tb = tah_token_bits(map, ranks, t, L.high_tokens);
    const int bits = tb.high ? L.high_bits : L.low_bits;
    const uint8_t* codes = a.payload + L.token_codes_offset(t, tb.rank) + j * g * bits / 8;
    const float zero = fp16_to_float(params[2 * i]);
    const float scale = fp16_to_float(params[2 * i + 1]);
    const uint32_t mask = (1u << bits) - 1u;
    __syncwarp();
    for (int k = lane; k < g; k += 32) {
      const int64_t bit = int64_t(k) * bits;
      const int shift = int(bit & 7);
      uint32_t v = uint32_t(codes[bit >> 3]) >> shift;
      if (shift + bits > 8) v |= uint32_t(codes[(bit >> 3) + 1]) << (8 - shift);
      y[k] = tah_value(v & mask, zero, scale);
    }
    if ((flags[i / 8] >> (i % 8)) & 1u) {  // uniform across the warp
      warp_hadamard(y, g, lane);
      if (lane == 0) {
        const int d = a.payload[L.pivots_offset() + i] & (g - 1);
        const float first = y[0];
        y[0] = y[d];
        y[d] = first;
      }
    }
    __syncwarp();
    Out* out = output + t * L.channels + j * g;
    for (int k = lane; k < g; k += 32) store_value(out, k, y[k]);
  }
}

}  // namespace

cudaError_t tah_entropy_cuda(const TahEncodeArgs& args, float* entropy, int32_t* status, cudaStream_t stream) {
  const TahLayout& L = args.layout;
  if (L.num_tokens == 0) return cudaSuccess;
  const unsigned grid = grid_for_warps(L.num_tokens);
  switch (args.input_type) {
    case FloatType::kFloat32:
      entropy_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(args.input), L.num_tokens, L.channels,
                                                    entropy, status);
      break;
    case FloatType::kFloat16:
      entropy_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const Fp16In*>(args.input), L.num_tokens,
                                                    L.channels, entropy, status);
      break;
    case FloatType::kBFloat16:
      entropy_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const Bf16In*>(args.input), L.num_tokens,
                                                    L.channels, entropy, status);
      break;
  }
  return cudaGetLastError();
}

cudaError_t tah_pack_map_cuda(const uint8_t* token_high, const TahLayout& layout, uint8_t* payload,
                              cudaStream_t stream) {
  const int64_t bytes = (layout.num_tokens + 7) / 8;
  if (bytes == 0) return cudaSuccess;
  const int64_t blocks = (bytes + kThreads - 1) / kThreads;
  pack_map_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(
      token_high, layout.num_tokens, payload + layout.map_offset());
  return cudaGetLastError();
}

cudaError_t tah_word_ranks_cuda(const uint8_t* payload, const TahLayout& layout, int64_t* ranks,
                                cudaStream_t stream) {
  word_ranks_kernel<<<1, kRankThreads, 0, stream>>>(reinterpret_cast<const uint64_t*>(payload + layout.map_offset()),
                                                    layout.map_words(), ranks);
  return cudaGetLastError();
}

cudaError_t tah_encode_tiles_cuda(const TahEncodeArgs& args, const int64_t* ranks, int32_t* status,
                                  cudaStream_t stream) {
  const int64_t tiles = args.layout.num_tiles();
  if (tiles == 0) return cudaSuccess;
  const unsigned grid = grid_for_warps(tiles);
  switch (args.input_type) {
    case FloatType::kFloat32: encode_tiles_kernel<float><<<grid, kThreads, 0, stream>>>(args, ranks, status); break;
    case FloatType::kFloat16: encode_tiles_kernel<Fp16In><<<grid, kThreads, 0, stream>>>(args, ranks, status); break;
    case FloatType::kBFloat16:
      encode_tiles_kernel<Bf16In><<<grid, kThreads, 0, stream>>>(args, ranks, status);
      break;
  }
  return cudaGetLastError();
}

cudaError_t tah_decode_cuda(const TahDecodeArgs& args, const int64_t* ranks, cudaStream_t stream) {
  const int64_t tiles = args.layout.num_tiles();
  if (tiles == 0) return cudaSuccess;
  const unsigned grid = grid_for_warps(tiles);
  switch (args.output_type) {
    case FloatType::kFloat32: decode_kernel<float><<<grid, kThreads, 0, stream>>>(args, ranks); break;
    case FloatType::kFloat16: decode_kernel<Fp16In><<<grid, kThreads, 0, stream>>>(args, ranks); break;
    case FloatType::kBFloat16: decode_kernel<Bf16In><<<grid, kThreads, 0, stream>>>(args, ranks); break;
  }
  return cudaGetLastError();
}

}  // namespace actkit::kernels
