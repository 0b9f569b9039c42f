// The 1-bit codec of 1-bit Adam and 1-bit LAMB (design §4.8): a chunk of n
// fp32 values travels as one fp32 scale and n sign bits. The scale is
// ‖x‖₂/√n, so the decoded chunk scale·sign(x) has the chunk's ℓ2 norm;
// sign(0) = +1. Error feedback: what the code loses (x − decoded) is kept by
// the caller and added to the next input, so over many steps nothing is lost
// for good (Σ decoded = Σ inputs − the last error).
//
// Byte layout of one encoded chunk (docs/formats.md, "1-bit chunks"):
//   [0,4)        scale, fp32 little-endian (≥ 0, finite; NaN marks a chunk
//                whose sender had non-finite values: the step is skipped)
//   [4,4+n/8)    signs, element 8j+k in bit k of byte j, 1 for ≥ 0
// n is a multiple of 8 (the compressed allreduce pads to make it so).
// No c10d here: the codec is plain arithmetic, shared by the allreduce and
// its single-process reference.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace actkit {

// Bytes of one encoded chunk of n values: 4 + n/8.
int64_t onebit_chunk_bytes(int64_t n);

// Encodes x + error into `out` (onebit_chunk_bytes(n) bytes) and leaves in
// `error` what the code lost: error ← (x + error) − decode(out). x and error
// are fp32, contiguous, same numel n (a multiple of 8, may be 0); they may
// not alias. If x + error holds a NaN or Inf, writes a NaN scale, leaves
// `error` untouched and returns false; true otherwise. Throws InvalidInput
// for a wrong dtype, device, layout or size.
bool onebit_encode(const at::Tensor& x, at::Tensor& error, uint8_t* out);
// The same, leaving `error` as it was and writing the new error to
// `new_error` (same size; may be `error` itself): a caller that may have to
// roll back keeps both without a copy. `new_error` is untouched when it
// returns false.
bool onebit_encode(const at::Tensor& x, const at::Tensor& error, at::Tensor& new_error, uint8_t* out);

// Adds (accumulate) or writes decode(bytes) into `out` (fp32, contiguous,
// numel n). Returns false, leaving `out` untouched, for a chunk whose scale
// is NaN, infinite or negative; true otherwise. Throws InvalidInput for a
// wrong `out`.
bool onebit_decode(const uint8_t* bytes, at::Tensor& out, bool accumulate = false);

// The scale an encoded chunk carries.
float onebit_scale(const uint8_t* bytes);

}  // namespace actkit
