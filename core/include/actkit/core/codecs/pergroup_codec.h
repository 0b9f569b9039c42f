// Per-group stochastic quantization (ActNN §4.1; byte layout in docs/formats.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "actkit/core/compressed_tensor.h"

namespace actkit {

// What to do with groups that hold NaN or +-Inf (or values beyond the fp16
// metadata range).
enum class NonFinitePolicy : uint8_t {
  kError,      // throw InvalidInput; nothing is returned
  kPropagate,  // the group decodes to NaN, as an fp32 pass would propagate it
};

struct PerGroupOptions {
  int bits = 2;                      // 1..8, used when sample_bits is empty
  std::vector<uint8_t> sample_bits;  // per-sample bits (size N) for mixed precision
  int group_size = 256;              // multiple of 8 in [8, 4096]
  MetaFormat meta_format = MetaFormat::kBFloat16;
  uint64_t seed = 0;                 // stochastic rounding stream
  NonFinitePolicy non_finite = NonFinitePolicy::kError;
};

// Quantizes `x` (fp32, fp16 or bf16; rank >= 1; CPU or CUDA) as N =
// x.size(0) samples (rank 1: one sample) of D values each, split into groups
// of options.group_size. Any strides are accepted: a non-contiguous view is
// first copied to a contiguous temporary (one input-sized allocation), so it
// is encoded by value. Element i's rounding noise depends only on
// (seed, i), so CPU and CUDA give the same payload for one seed.
// Throws InvalidInput for an unsupported dtype/device/rank, bits outside
// 1..8, sample_bits of the wrong length, a bad group size, or (with
// NonFinitePolicy::kError) NaN/Inf in the input.
CompressedTensor encode_per_group(const at::Tensor& x, const PerGroupOptions& options);

}  // namespace actkit
