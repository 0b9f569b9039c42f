// CPU bit-field kernels (mask and index codecs). Work is split into chunks of
// a multiple of 8 values, so every chunk starts on a byte boundary and only
// the stream's last byte can be partial: chunks never share a byte.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>

#include "actkit/kernels/bitfield.h"
#include "actkit/kernels/half.h"
#include "bitpack.h"

namespace actkit::kernels {
namespace {

constexpr int64_t kChunk = 64 * 1024;  // values per task; a multiple of 8

template <typename Fn>
void for_each_chunk(int64_t count, Fn&& fn) {
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, chunks, 1), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t c = r.begin(); c != r.end(); ++c) {
      const int64_t begin = c * kChunk;
      fn(begin, std::min(kChunk, count - begin));
    }
  });
}

template <typename T>
bool narrow_checked(const T* src, int64_t len, int bits, uint8_t* dst) {
  using U = std::make_unsigned_t<T>;
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
void widen(const uint8_t* src, int64_t len, T* dst) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) dst[j] = T(src[j]);
}

}  // namespace

EncodeStatus bitfield_encode_cpu(const void* values, IntType type, int64_t count, int bits, uint8_t* out) {
  std::atomic<bool> in_range{true};
  for_each_chunk(count, [&](int64_t begin, int64_t len) {
    alignas(64) uint8_t buf[kChunk];
    bool ok = true;
    switch (type) {
      case IntType::kUInt8: ok = narrow_checked(static_cast<const uint8_t*>(values) + begin, len, bits, buf); break;
      case IntType::kInt32: ok = narrow_checked(static_cast<const int32_t*>(values) + begin, len, bits, buf); break;
      case IntType::kInt64: ok = narrow_checked(static_cast<const int64_t*>(values) + begin, len, bits, buf); break;
    }
    if (!ok) {
      in_range.store(false, std::memory_order_relaxed);
      return;
    }
    cpu::pack_codes(buf, len, bits, out, begin * bits);
  });
  return in_range.load() ? EncodeStatus::kOk : EncodeStatus::kOutOfRange;
}

void bitfield_encode_positive_cpu(const void* values, FloatType type, int64_t count, uint8_t* out) {
  for_each_chunk(count, [&](int64_t begin, int64_t len) {
    alignas(64) uint8_t buf[kChunk];
    switch (type) {
      case FloatType::kFloat32: {
        const float* x = static_cast<const float*>(values) + begin;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) buf[j] = x[j] > 0.0f;
        break;
      }
      case FloatType::kFloat16:
      case FloatType::kBFloat16: {
        // Positive iff the sign bit is clear and the value is neither zero
        // nor NaN; the same test on bits works for both 16-bit formats.
        const uint16_t* x = static_cast<const uint16_t*>(values) + begin;
        const uint16_t nan_above = type == FloatType::kFloat16 ? 0x7c00 : 0x7f80;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) buf[j] = x[j] != 0 && x[j] <= nan_above;
        break;
      }
    }
    cpu::pack_codes(buf, len, 1, out, begin);
  });
}

void bitfield_decode_cpu(const uint8_t* in, int64_t count, int bits, void* out, IntType type) {
  for_each_chunk(count, [&](int64_t begin, int64_t len) {
    switch (type) {
      case IntType::kUInt8:
        cpu::unpack_codes(in, begin * bits, len, bits, static_cast<uint8_t*>(out) + begin);
        break;
      case IntType::kInt32: {
        alignas(64) uint8_t buf[kChunk];
        cpu::unpack_codes(in, begin * bits, len, bits, buf);
        widen(buf, len, static_cast<int32_t*>(out) + begin);
        break;
      }
      case IntType::kInt64: {
        alignas(64) uint8_t buf[kChunk];
        cpu::unpack_codes(in, begin * bits, len, bits, buf);
        widen(buf, len, static_cast<int64_t*>(out) + begin);
        break;
      }
    }
  });
}

}  // namespace actkit::kernels
