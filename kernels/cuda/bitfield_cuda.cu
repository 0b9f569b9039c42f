// CUDA bit-field kernels (mask and index codecs). Each thread owns one output
// byte when packing, so no atomics and no zero-fill are needed.
#include <cuda_runtime.h>

#include "actkit/kernels/cuda.h"
#include "actkit/kernels/half.h"

namespace actkit::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t read_int(const void* p, IntType t, int64_t i) {
  switch (t) {
    case IntType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case IntType::kInt32: return uint64_t(uint32_t(static_cast<const int32_t*>(p)[i]));
    default: return uint64_t(static_cast<const int64_t*>(p)[i]);
  }
}

__device__ __forceinline__ bool is_positive(const void* p, FloatType t, int64_t i) {
  switch (t) {
    case FloatType::kFloat32: return static_cast<const float*>(p)[i] > 0.0f;
    case FloatType::kFloat16: {
      const uint16_t h = static_cast<const uint16_t*>(p)[i];
      return h != 0 && h <= 0x7c00;
    }
    default: {
      const uint16_t h = static_cast<const uint16_t*>(p)[i];
      return h != 0 && h <= 0x7f80;
    }
  }
}

__global__ void encode_kernel(const void* values, IntType type, int64_t count, int bits, uint8_t* out,
                              int32_t* status) {
  const int64_t nbytes = (count * bits + 7) / 8;
  const uint64_t limit = (1ull << bits) - 1ull;
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < nbytes;
       b += int64_t(gridDim.x) * blockDim.x) {
    uint32_t v = 0;
    const int64_t hi = min(b * 8 + 8, count * bits);
    for (int64_t k = (b * 8) / bits; k * bits < hi; ++k) {
      const uint64_t x = read_int(values, type, k);
      if (x > limit) atomicCAS(status, int32_t(EncodeStatus::kOk), int32_t(EncodeStatus::kOutOfRange));
      const int64_t shift = k * bits - b * 8;
      v |= shift >= 0 ? uint32_t(x & limit) << shift : uint32_t(x & limit) >> -shift;
    }
    out[b] = uint8_t(v);
  }
}

__global__ void encode_positive_kernel(const void* values, FloatType type, int64_t count, uint8_t* out) {
  const int64_t nbytes = (count + 7) / 8;
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < nbytes;
       b += int64_t(gridDim.x) * blockDim.x) {
    uint32_t v = 0;
    const int64_t end = min(b * 8 + 8, count);
    for (int64_t k = b * 8; k < end; ++k) v |= uint32_t(is_positive(values, type, k)) << (k - b * 8);
    out[b] = uint8_t(v);
  }
}

__global__ void decode_kernel(const uint8_t* in, int64_t count, int bits, void* out, IntType type) {
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < count;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bit = k * bits;
    const int shift = int(bit & 7);
    uint32_t v = uint32_t(in[bit >> 3]) >> shift;
    if (shift + bits > 8) v |= uint32_t(in[(bit >> 3) + 1]) << (8 - shift);
    v &= mask;
    switch (type) {
      case IntType::kUInt8: static_cast<uint8_t*>(out)[k] = uint8_t(v); break;
      case IntType::kInt32: static_cast<int32_t*>(out)[k] = int32_t(v); break;
      case IntType::kInt64: static_cast<int64_t*>(out)[k] = int64_t(v); break;
    }
  }
}

unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return unsigned(blocks < 65536 ? blocks : 65536);
}

}  // namespace

cudaError_t bitfield_encode_cuda(const void* values, IntType type, int64_t count, int bits, uint8_t* out,
                                 int32_t* status, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  encode_kernel<<<grid_for((count * bits + 7) / 8), kThreads, 0, stream>>>(values, type, count, bits, out,
                                                                             status);
  return cudaGetLastError();
}

cudaError_t bitfield_encode_positive_cuda(const void* values, FloatType type, int64_t count, uint8_t* out,
                                          cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  encode_positive_kernel<<<grid_for((count + 7) / 8), kThreads, 0, stream>>>(values, type, count, out);
  return cudaGetLastError();
}

cudaError_t bitfield_decode_cuda(const uint8_t* in, int64_t count, int bits, void* out, IntType type,
                                 cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  decode_kernel<<<grid_for(count), kThreads, 0, stream>>>(in, count, bits, out, type);
  return cudaGetLastError();
}

}  // namespace actkit::kernels
