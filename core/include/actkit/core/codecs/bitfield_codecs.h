// The 1-bit mask codec (ReLU, Dropout) and the small-integer index codec
// (MaxPool argmax within the window).
#pragma once

#include <ATen/core/Tensor.h>

#include "actkit/core/compressed_tensor.h"

namespace actkit {

// Packs a bool tensor (any shape and strides, CPU or CUDA) at 1 bit per
// value; decode() returns a bool tensor. Throws InvalidInput if `mask` is
// not bool.
CompressedTensor encode_mask(const at::Tensor& mask);

// The mask (x > 0) of a float tensor (fp32/fp16/bf16), computed while
// packing: what ReLU's backward needs. NaN gives false. decode() returns a
// bool tensor. Throws InvalidInput for other dtypes.
CompressedTensor encode_positive_mask(const at::Tensor& x);

// Packs integers in [0, 2^bits) (uint8, int32 or int64; any shape) at
// `bits` bits each; decode() returns the original dtype. Throws InvalidInput
// if bits is outside 1..8, the dtype is unsupported or a value is out of
// range.
CompressedTensor encode_index(const at::Tensor& indices, int bits);

}  // namespace actkit
