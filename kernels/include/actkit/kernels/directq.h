// DirectQ kernels: max-abs quantization (design §4.5; byte layout
// in docs/formats.md). The argument blocks and the CPU entry points; the
// CUDA entry points taking the same blocks are in cuda.h.
//
// The input is `numel` row-major values; value i uses scale i % num_scales,
// so one scale is per tensor and C scales are per channel of a tensor whose
// last dimension is C. Codes form one LSB-first bit stream: code i occupies
// stream bits [i * bits, (i + 1) * bits).
#pragma once

#include "actkit/kernels/common.h"
#include "actkit/kernels/counter_rng.h"

namespace actkit::kernels {

struct DirectQEncodeArgs {
  const void* input = nullptr;  // numel contiguous values of `input_type`
  FloatType input_type = FloatType::kFloat32;
  int64_t numel = 0;
  int64_t num_scales = 1;  // 1, or the size of the last dimension
  int32_t bits = 8;        // 2..8
  DirectQGrid grid = DirectQGrid::kSymmetric;
  bool stochastic = false; // unbiased stochastic rounding instead of round-to-nearest
  RngKey key;              // the stochastic rounding stream
  // num_scales entries, zero-filled by the caller: encode stores max |x|
  // of each scale's values there (as fp32).
  float* scales = nullptr;
  uint8_t* codes = nullptr;  // ceil(numel * bits / 8) bytes, zero-filled by the caller
};

struct DirectQDecodeArgs {
  const float* scales = nullptr;  // num_scales entries
  const uint8_t* codes = nullptr;
  int64_t numel = 0;
  int64_t num_scales = 1;
  int32_t bits = 8;
  DirectQGrid grid = DirectQGrid::kSymmetric;
  void* output = nullptr;  // numel contiguous values of `output_type`
  FloatType output_type = FloatType::kFloat32;
};

// CPU kernels, parallel with TBB. Encode returns kOk, or kNonFinite when the
// input holds NaN or +-Inf (the outputs are then unspecified).
EncodeStatus directq_encode_cpu(const DirectQEncodeArgs& args);
void directq_decode_cpu(const DirectQDecodeArgs& args);

}  // namespace actkit::kernels
