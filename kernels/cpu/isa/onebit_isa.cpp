// The 1-bit codec's passes over one block: the sum of squares, the signs
// with the new error, and the decode.
#include <cstdint>

#include "bitpack.h"
#include "isa_functions.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

// Values per local buffer of sign bytes; a multiple of 8.
constexpr int64_t kPiece = 4096;

// How far ahead the sum of squares prefetches its two inputs (values): 2 KiB.
// On a Cascade Lake Xeon the prefetch raised the encode 8 %; 1, 2 and 4 KiB
// measured alike.
constexpr int64_t kAhead = 512;

ACTKIT_CPU_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

}  // namespace

double onebit_block_sum(const float* x, const float* e, int64_t n) {
  // Lane l adds the squares of values l, l + 8, l + 16, ... in turn; the
  // same lanes in every variant (vector width changes nothing).
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; i += 8) {
    // Two streams read once each: fetched kAhead values ahead, across the
    // 4 KiB pages where the hardware prefetcher stops.
    if ((i & 15) == 0 && i + kAhead < n) {
      __builtin_prefetch(x + i + kAhead, 0, 3);
      __builtin_prefetch(e + i + kAhead, 0, 3);
    }
#pragma omp simd
    for (int l = 0; l < 8; ++l) {
      const double y = double(x[i + l] + e[i + l]);
      part[l] += y * y;
    }
  }
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

void onebit_signs(const float* x, const float* e, float* new_error, float scale, int64_t n, uint8_t* signs) {
  alignas(64) uint8_t bits[kPiece];
  for (int64_t at = 0; at < n; at += kPiece) {
    const int64_t len = min64(kPiece, n - at);
    const float* xs = x + at;
    const float* es = e + at;
    float* ns = new_error + at;
    // es[i] is read before ns[i] is written: new_error may alias e.
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      const float y = xs[i] + es[i];
      const bool positive = y >= 0.0f;  // sign(0) = +1
      bits[i] = positive ? 1 : 0;
      ns[i] = y - (positive ? scale : -scale);
    }
    cpu::pack_codes(bits, len, 1, signs + at / 8, 0);
  }
}

void onebit_decode(const uint8_t* signs, float scale, int64_t n, float* out, bool accumulate) {
  alignas(64) uint8_t bits[kPiece];
  for (int64_t at = 0; at < n; at += kPiece) {
    const int64_t len = min64(kPiece, n - at);
    cpu::unpack_codes(signs + at / 8, 0, len, 1, bits);
    float* o = out + at;
    if (accumulate) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] += bits[i] != 0 ? scale : -scale;
    } else {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = bits[i] != 0 ? scale : -scale;
    }
  }
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
