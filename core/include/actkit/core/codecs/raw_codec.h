// The values themselves in CompressedTensor's format: how an uncompressed
// (fp32) or half-precision (fp16, bf16) tensor travels between processes
// with the same header and checksum as every compressed one
// (docs/formats.md, codec kind 6).
#pragma once

#include <ATen/core/Tensor.h>

#include "actkit/core/compressed_tensor.h"

namespace actkit {

// `x` (fp32, fp16 or bf16; any shape and strides; CPU or CUDA) stored as
// `as` (fp32, fp16 or bf16; casting rounds to nearest). decode() returns a
// tensor of dtype `as`. Throws InvalidInput for another dtype or an
// undefined tensor; NaN/Inf are values like any other here.
CompressedTensor encode_raw(const at::Tensor& x, at::ScalarType as = at::kFloat);

}  // namespace actkit
