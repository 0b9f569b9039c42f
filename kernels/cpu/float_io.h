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

// Brings a range of bytes into the cache a piece at a time, each piece
// asked for beside the work on the data before it. The encoders read a token
// or a chunk of groups from memory at the top of their loops, and the
// hardware's stream prefetcher stops at each 4 KiB page: a 3 KiB token began
// with a memory latency almost every time. Prefetching the next one while
// this one is computed hides it, but not all at once: a core tracks about a
// dozen outstanding line fills, and a burst of 48 prefetches stalled at the
// top of every token (a fifth of TAH-Quant's entropy pass on a Cascade Lake
// Xeon). So the caller advances it as it consumes its own data.
class Prefetcher {
 public:
  ACTKIT_CPU_INLINE Prefetcher() = default;
  // The range [begin, begin + bytes); nothing when bytes <= 0.
  ACTKIT_CPU_INLINE Prefetcher(const void* begin, int64_t bytes)
      : next_(reinterpret_cast<uintptr_t>(begin) & ~uintptr_t(kLine - 1)),
        asked_(reinterpret_cast<uintptr_t>(begin)),
        end_(bytes > 0 ? asked_ + uintptr_t(bytes) : asked_) {}

  // Asks for the lines of the next `bytes` (>= 0) bytes of the range: after
  // advances that add up to the range's length, every line of it was asked
  // for, whatever the range's alignment.
  ACTKIT_CPU_INLINE void advance(int64_t bytes) {
    asked_ = end_ - asked_ < uintptr_t(bytes) ? end_ : asked_ + uintptr_t(bytes);
    for (; next_ < asked_; next_ += kLine) __builtin_prefetch(reinterpret_cast<const void*>(next_), 0, 3);
  }

  // Asks for whatever of the range is left.
  ACTKIT_CPU_INLINE void finish() { advance(int64_t(end_ - asked_)); }

 private:
  static constexpr uintptr_t kLine = 64;
  uintptr_t next_ = 0;   // the next line to ask for (line-aligned)
  uintptr_t asked_ = 0;  // the end of the bytes asked for so far; asked_ <= end_
  uintptr_t end_ = 0;
};

// A Prefetcher of values[start, start + len).
template <typename In>
ACTKIT_CPU_INLINE Prefetcher prefetch_values(const In* input, int64_t start, int64_t len) {
  return Prefetcher(input + start, len * int64_t(sizeof(In)));
}

}  // namespace actkit::kernels::cpu
