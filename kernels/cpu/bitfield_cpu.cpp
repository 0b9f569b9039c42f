// CPU bit-field kernels (mask and index codecs). Work is split into chunks of
// a multiple of 8 values, so every chunk starts on a byte boundary and only
// the stream's last byte can be partial: chunks never share a byte. Each
// chunk runs in the selected instruction-set variant (isa/bitfield_isa.cpp).
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>

#include "actkit/kernels/bitfield.h"
#include "isa/isa_kernels.h"

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

}  // namespace

EncodeStatus bitfield_encode_cpu(const void* values, IntType type, int64_t count, int bits, uint8_t* out) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  std::atomic<bool> in_range{true};
  for_each_chunk(count, [&](int64_t begin, int64_t len) {
    if (!k.bitfield_encode(values, type, begin, len, bits, out)) in_range.store(false, std::memory_order_relaxed);
  });
  return in_range.load() ? EncodeStatus::kOk : EncodeStatus::kOutOfRange;
}

void bitfield_encode_positive_cpu(const void* values, FloatType type, int64_t count, uint8_t* out) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  for_each_chunk(count, [&](int64_t begin, int64_t len) { k.bitfield_encode_positive(values, type, begin, len, out); });
}

void bitfield_decode_cpu(const uint8_t* in, int64_t count, int bits, void* out, IntType type) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  for_each_chunk(count, [&](int64_t begin, int64_t len) { k.bitfield_decode(in, begin, len, bits, out, type); });
}

}  // namespace actkit::kernels
