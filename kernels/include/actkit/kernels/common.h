// Definitions shared by the CPU and CUDA kernels.
//
// Everything under kernels/ works on raw pointers so that nvcc can compile the
// CUDA side without LibTorch, and so that the CPU and CUDA paths can share the
// exact same scalar arithmetic (see pergroup_math.h): that sharing is what
// makes their outputs bit-identical for one seed.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ACTKIT_HD __host__ __device__ __forceinline__
#elif defined(ACTKIT_CPU_ISA)
// An instruction-set variant of the CPU kernels (kernels/cpu/isa/): every
// helper is inlined into the variant, so no out-of-line copy compiled for
// one instruction set can stand in for another's (scripts/check-isa-symbols.sh).
#define ACTKIT_HD __attribute__((always_inline)) inline
#else
#define ACTKIT_HD inline
#endif
// Host-only helpers of the CPU kernels, inlined the same way.
#define ACTKIT_CPU_INLINE ACTKIT_HD

namespace actkit::kernels {

// Element type of a tensor handed to a kernel.
enum class FloatType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// DirectQ's grid over [-s, s] (directq_math.h): 2^bits - 1 levels with zero
// among them, or all 2^bits levels.
enum class DirectQGrid : uint8_t { kSymmetric = 0, kFull = 1 };

// Storage format of the 16-bit per-group metadata (zero point and range).
enum class MetaFormat : uint8_t { kBFloat16 = 0, kFloat16 = 1 };

// Result of an encode kernel. Anything but kOk means the output is garbage and
// must be discarded by the caller (the dispatch layer throws).
enum class EncodeStatus : int32_t {
  kOk = 0,
  kNonFinite = 1,     // the input held NaN or +-Inf
  kMetaOverflow = 2,  // min or range does not fit the 16-bit metadata format
  kOutOfRange = 3,    // an index value does not fit the requested bits
};

ACTKIT_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ACTKIT_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Float arithmetic that the compiler may not fuse into FMA or reassociate:
// the CPU and CUDA kernels must round identically. The CPU files are built
// with -ffp-contract=off; on CUDA the _rn intrinsics are never contracted.
ACTKIT_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

ACTKIT_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

ACTKIT_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

ACTKIT_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace actkit::kernels
