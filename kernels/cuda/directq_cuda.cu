// CUDA DirectQ. Scales: integer atomicMax on |x|'s bits (order-free, so the
// result is the CPU's). Codes: each thread owns 8 consecutive values, which
// are `bits` whole bytes of the stream, so no atomics and no zero-fill are
// needed for the codes. The scalar math comes from directq_math.h, shared
// with the CPU kernels.
#include <cuda_runtime.h>

#include "actkit/kernels/cuda.h"
#include "actkit/kernels/directq_math.h"
#include "actkit/kernels/half.h"
#include "float_io.cuh"  // the element I/O every kernel here shares

namespace actkit::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kValuesPerThread = 8;  // eight codes of b bits are b whole bytes
constexpr unsigned kFullMask = 0xffffffffu;

unsigned grid_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// One scale: every thread keeps a running max, a warp combines them, one
// atomic per warp.
template <typename In>
__global__ void __launch_bounds__(kThreads) tensor_max_kernel(const In* x, int64_t numel, unsigned int* scale) {
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    m = max(m, abs_bits(load_value(x, i)));
  }
  for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(kFullMask, m, off));
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(scale, m);
}

// One scale per channel: blockIdx.y takes a slab of rows, threads take
// channels (consecutive threads read consecutive addresses).
template <typename In>
__global__ void __launch_bounds__(kThreads)
    channel_max_kernel(const In* x, int64_t rows, int64_t channels, int64_t rows_per_slab, unsigned int* scales) {
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_slab;
  const int64_t r1 = min(rows, r0 + rows_per_slab);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    uint32_t m = 0;
    for (int64_t r = r0; r < r1; ++r) m = max(m, abs_bits(load_value(x, r * channels + c)));
    if (m != 0) atomicMax(scales + c, m);
  }
}

template <typename In>
__global__ void __launch_bounds__(kThreads) quantize_kernel(DirectQEncodeArgs a, int32_t* status) {
  const In* x = static_cast<const In*>(a.input);
  const float top = directq_half(a.bits, a.grid);
  const bool full = a.grid == DirectQGrid::kFull;
  const int64_t runs = (a.numel + kValuesPerThread - 1) / kValuesPerThread;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < runs; g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i0 = g * kValuesPerThread;
    const int n = int(min(int64_t(kValuesPerThread), a.numel - i0));
    uint64_t packed = 0;
#pragma unroll
    for (int k = 0; k < kValuesPerThread; ++k) {
      if (k < n) {
        const int64_t i = i0 + k;
        const float s = a.scales[a.num_scales == 1 ? 0 : i % a.num_scales];
        if (!scale_is_finite(abs_bits(s))) atomicCAS(status, int32_t(EncodeStatus::kOk), int32_t(EncodeStatus::kNonFinite));
        const float inv = directq_inv_step(s, top);
        const float v = load_value(x, i);
        const uint8_t q = a.stochastic ? directq_code_stochastic(v, inv, top, counter_uniform(a.key, uint64_t(i)))
                          : full       ? directq_code_nearest_full(v, inv, top)
                                       : directq_code_nearest(v, inv, top);
        packed |= uint64_t(q) << (k * a.bits);
      }
    }
    const int bytes = (n * a.bits + 7) / 8;
    uint8_t* out = a.codes + g * a.bits;
    for (int b = 0; b < bytes; ++b) out[b] = uint8_t(packed >> (8 * b));
  }
}

template <typename Out>
__global__ void __launch_bounds__(kThreads) decode_kernel(DirectQDecodeArgs a) {
  Out* y = static_cast<Out*>(a.output);
  const float half = directq_half(a.bits, a.grid);
  const int32_t top_code = directq_top_code(a.bits, a.grid);
  const uint64_t mask = (uint64_t(1) << a.bits) - 1u;
  const int64_t runs = (a.numel + kValuesPerThread - 1) / kValuesPerThread;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < runs; g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i0 = g * kValuesPerThread;
    const int n = int(min(int64_t(kValuesPerThread), a.numel - i0));
    const int bytes = (n * a.bits + 7) / 8;
    const uint8_t* in = a.codes + g * a.bits;
    uint64_t packed = 0;
    for (int b = 0; b < bytes; ++b) packed |= uint64_t(in[b]) << (8 * b);
    for (int k = 0; k < n; ++k) {
      const int64_t i = i0 + k;
      const float step = directq_step(a.scales[a.num_scales == 1 ? 0 : i % a.num_scales], half);
      store_value(y, i, directq_value(uint32_t((packed >> (k * a.bits)) & mask), step, half, top_code));
    }
  }
}

template <typename In>
cudaError_t encode_typed(const DirectQEncodeArgs& a, int32_t* status, cudaStream_t stream) {
  const In* x = static_cast<const In*>(a.input);
  unsigned int* scales = reinterpret_cast<unsigned int*>(a.scales);
  if (a.num_scales == 1) {
    tensor_max_kernel<In><<<grid_for(a.numel, kThreads * 16), kThreads, 0, stream>>>(x, a.numel, scales);
  } else {
    const int64_t rows = a.numel / a.num_scales;
    const int64_t slabs = rows < 1024 ? rows : 1024;
    const int64_t rows_per_slab = (rows + slabs - 1) / slabs;
    const dim3 grid(grid_for(a.num_scales, kThreads), unsigned((rows + rows_per_slab - 1) / rows_per_slab));
    channel_max_kernel<In><<<grid, kThreads, 0, stream>>>(x, rows, a.num_scales, rows_per_slab, scales);
  }
  const int64_t runs = (a.numel + kValuesPerThread - 1) / kValuesPerThread;
  quantize_kernel<In><<<grid_for(runs, kThreads), kThreads, 0, stream>>>(a, status);
  return cudaGetLastError();
}

}  // namespace

cudaError_t directq_encode_cuda(const DirectQEncodeArgs& args, int32_t* status, cudaStream_t stream) {
  if (args.numel == 0) return cudaSuccess;
  switch (args.input_type) {
    case FloatType::kFloat32: return encode_typed<float>(args, status, stream);
    case FloatType::kFloat16: return encode_typed<Fp16In>(args, status, stream);
    case FloatType::kBFloat16: return encode_typed<Bf16In>(args, status, stream);
  }
  return cudaSuccess;
}

cudaError_t directq_decode_cuda(const DirectQDecodeArgs& args, cudaStream_t stream) {
  if (args.numel == 0) return cudaSuccess;
  const unsigned grid = grid_for((args.numel + kValuesPerThread - 1) / kValuesPerThread, kThreads);
  switch (args.output_type) {
    case FloatType::kFloat32: decode_kernel<float><<<grid, kThreads, 0, stream>>>(args); break;
    case FloatType::kFloat16: decode_kernel<Fp16In><<<grid, kThreads, 0, stream>>>(args); break;
    case FloatType::kBFloat16: decode_kernel<Bf16In><<<grid, kThreads, 0, stream>>>(args); break;
  }
  return cudaGetLastError();
}

}  // namespace actkit::kernels
