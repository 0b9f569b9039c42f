// CPU 1-bit codec: TBB over blocks of kOneBitBlock values, each block in the
// selected instruction-set variant (isa/onebit_isa.cpp). Two passes: the
// scale needs every value before the first error can be written.
#include "actkit/kernels/onebit.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "isa/isa_kernels.h"

namespace actkit::kernels {
namespace {

using cpu::kOneBitBlock;

// Blocks per TBB task (256 KiB of each input).
constexpr int64_t kGrainBlocks = 16;

template <typename Fn>
void for_each_block(int64_t n, Fn&& fn) {
  const int64_t blocks = (n + kOneBitBlock - 1) / kOneBitBlock;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, blocks, kGrainBlocks), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t b = r.begin(); b != r.end(); ++b) {
      const int64_t begin = b * kOneBitBlock;
      fn(b, begin, std::min(kOneBitBlock, n - begin));
    }
  });
}

}  // namespace

bool onebit_encode_cpu(const float* x, const float* error, float* new_error, int64_t n, uint8_t* out) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  std::vector<double> block_sums(size_t((n + kOneBitBlock - 1) / kOneBitBlock));
  for_each_block(n, [&](int64_t b, int64_t begin, int64_t len) {
    block_sums[size_t(b)] = k.onebit_block_sum(x + begin, error + begin, len);
  });
  double sum = 0.0;
  for (double s : block_sums) sum += s;  // in block order: the fixed order of the header
  if (!std::isfinite(sum)) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(out, &nan, sizeof nan);
    std::memset(out + 4, 0, size_t(n / 8));
    return false;
  }
  const float scale = n > 0 ? float(std::sqrt(sum / double(n))) : 0.0f;
  std::memcpy(out, &scale, sizeof scale);  // little-endian hosts only (x86-64, aarch64)
  for_each_block(n, [&](int64_t, int64_t begin, int64_t len) {
    k.onebit_signs(x + begin, error + begin, new_error + begin, scale, len, out + 4 + begin / 8);
  });
  return true;
}

bool onebit_decode_cpu(const uint8_t* bytes, int64_t n, float* out, bool accumulate) {
  float scale;
  std::memcpy(&scale, bytes, sizeof scale);
  if (!std::isfinite(scale) || scale < 0) return false;
  const cpu::IsaKernels& k = cpu::isa_kernels();
  for_each_block(n, [&](int64_t, int64_t begin, int64_t len) {
    k.onebit_decode(bytes + 4 + begin / 8, scale, len, out + begin, accumulate);
  });
  return true;
}

}  // namespace actkit::kernels
