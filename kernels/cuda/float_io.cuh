// The CUDA kernels' element I/O: fp32, bf16 and fp16 tensors read as float
// and written back with round-to-nearest-even, through half.h's bit-level
// conversions (so that a device value is the CPU's bit for bit). Included
// by every .cu file that reads or writes activations; the CPU side shares
// half.h the same way.
#pragma once

#include <cstdint>

#include "actkit/kernels/half.h"

namespace actkit::kernels {

// The 16-bit inputs as distinct types, so that overloads pick the format.
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

}  // namespace actkit::kernels
