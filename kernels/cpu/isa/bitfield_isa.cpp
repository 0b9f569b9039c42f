// Bit fields (mask and index codecs) over a range of values that starts on a
// byte of the stream (a multiple of 8 values).
#include <cstdint>

#include "bitpack.h"
#include "float_io.h"
#include "isa_functions.h"

namespace actkit::kernels::ACTKIT_CPU_ISA {
namespace {

// The values per local buffer; a multiple of 8.
constexpr int64_t kPiece = 16 * 1024;

ACTKIT_CPU_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

template <typename T>
bool narrow_checked(const T* src, int64_t len, int bits, uint8_t* dst) {
  using U = typename cpu::Unsigned<T>::type;
  const U limit = U((1u << bits) - 1u);
  U worst = 0;  // largest value seen, negative numbers read as huge
#pragma omp simd reduction(max : worst)
  for (int64_t j = 0; j < len; ++j) {
    const U v = U(src[j]);
    worst = v > worst ? v : worst;
    dst[j] = uint8_t(v);
  }
  return worst <= limit;
}

template <typename T>
bool encode_typed(const T* values, int64_t begin, int64_t len, int bits, uint8_t* out) {
  alignas(64) uint8_t buf[kPiece];
  for (int64_t at = 0; at < len; at += kPiece) {
    const int64_t n = min64(kPiece, len - at);
    if (!narrow_checked(values + begin + at, n, bits, buf)) return false;
    cpu::pack_codes(buf, n, bits, out, (begin + at) * bits);
  }
  return true;
}

template <typename T>
void decode_typed(const uint8_t* in, int64_t begin, int64_t len, int bits, T* out) {
  alignas(64) uint8_t buf[kPiece];
  for (int64_t at = 0; at < len; at += kPiece) {
    const int64_t n = min64(kPiece, len - at);
    cpu::unpack_codes(in, (begin + at) * bits, n, bits, buf);
    T* dst = out + begin + at;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] = T(buf[j]);
  }
}

}  // namespace

bool bitfield_encode(const void* values, IntType type, int64_t begin, int64_t len, int bits, uint8_t* out) {
  switch (type) {
    case IntType::kUInt8: return encode_typed(static_cast<const uint8_t*>(values), begin, len, bits, out);
    case IntType::kInt32: return encode_typed(static_cast<const int32_t*>(values), begin, len, bits, out);
    case IntType::kInt64: return encode_typed(static_cast<const int64_t*>(values), begin, len, bits, out);
  }
  return true;
}

void bitfield_encode_positive(const void* values, FloatType type, int64_t begin, int64_t len, uint8_t* out) {
  alignas(64) uint8_t buf[kPiece];
  for (int64_t at = 0; at < len; at += kPiece) {
    const int64_t n = min64(kPiece, len - at);
    const int64_t first = begin + at;
    if (type == FloatType::kFloat32) {
      const float* x = static_cast<const float*>(values) + first;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) buf[j] = x[j] > 0.0f;
    } else {
      // Positive iff the sign bit is clear and the value is neither zero
      // nor NaN; the same test on bits works for both 16-bit formats.
      const uint16_t* x = static_cast<const uint16_t*>(values) + first;
      const uint16_t nan_above = type == FloatType::kFloat16 ? 0x7c00 : 0x7f80;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) buf[j] = x[j] != 0 && x[j] <= nan_above;
    }
    cpu::pack_codes(buf, n, 1, out, first);
  }
}

void bitfield_decode(const uint8_t* in, int64_t begin, int64_t len, int bits, void* out, IntType type) {
  switch (type) {
    case IntType::kUInt8: cpu::unpack_codes(in, begin * bits, len, bits, static_cast<uint8_t*>(out) + begin); break;
    case IntType::kInt32: decode_typed(in, begin, len, bits, static_cast<int32_t*>(out)); break;
    case IntType::kInt64: decode_typed(in, begin, len, bits, static_cast<int64_t*>(out)); break;
  }
}

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
