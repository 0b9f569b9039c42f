// Loading fp32/fp16/bf16 values as fp32 and storing fp32 results back, for
// the CPU kernels. The 16-bit formats get types of their own (both are
// uint16_t bits underneath) so that kernels can be templated on the element
// type and fp32 can skip the copy entirely.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "actkit/kernels/half.h"

namespace actkit::kernels::cpu {

struct Bf16In {
  uint16_t bits;
};
struct Fp16In {
  uint16_t bits;
};
// The unsigned type of the same width (no <type_traits> templates with
// external linkage in the variants).
template <typename T>
struct Unsigned;
template <>
struct Unsigned<uint8_t> {
  using type = uint8_t;
};
template <>
struct Unsigned<int32_t> {
  using type = uint32_t;
};
template <>
struct Unsigned<int64_t> {
  using type = uint64_t;
};

template <typename T>
constexpr bool is_float_v = std::is_same_v<T, float>;

ACTKIT_CPU_INLINE void to_float(const float* src, int64_t len, float* dst) { std::memcpy(dst, src, size_t(len) * 4); }

ACTKIT_CPU_INLINE void to_float(const Bf16In* src, int64_t len, float* dst) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) dst[j] = bf16_to_float(src[j].bits);
}

ACTKIT_CPU_INLINE void to_float(const Fp16In* src, int64_t len, float* dst) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) dst[j] = fp16_to_float(src[j].bits);
}

ACTKIT_CPU_INLINE void from_float(const float* src, int64_t len, float* dst) { std::memcpy(dst, src, size_t(len) * 4); }

ACTKIT_CPU_INLINE void from_float(const float* src, int64_t len, Bf16In* dst) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) dst[j].bits = float_to_bf16_rne(src[j]);
}

ACTKIT_CPU_INLINE void from_float(const float* src, int64_t len, Fp16In* dst) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) dst[j].bits = float_to_fp16_rne(src[j]);
}

// values[start, start + len) as fp32: a pointer into the input when it is
// fp32, otherwise converted into `buf` (len entries).
template <typename In>
ACTKIT_CPU_INLINE const float* load_floats(const In* input, int64_t start, int64_t len, float* buf) {
  if constexpr (is_float_v<In>) {
    return input + start;
  } else {
    to_float(input + start, len, buf);
    return buf;
  }
}

// Asks for values[start, start + len) to be brought into the cache before
// they are used. The encoders read a token or a chunk of groups from memory
// at the top of their loops, and the hardware's stream prefetcher stops at
// each 4 KiB page: a 3 KiB token began with a memory latency almost every
// time. Prefetching the next one while this one is computed hides it.
template <typename In>
ACTKIT_CPU_INLINE void prefetch_values(const In* input, int64_t start, int64_t len) {
  const char* base = reinterpret_cast<const char*>(input + start);
  const int64_t bytes = len * int64_t(sizeof(In));
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(base + off, 0, 3);
}

}  // namespace actkit::kernels::cpu
