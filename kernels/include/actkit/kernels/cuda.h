// CUDA entry points of the kernels: same argument blocks as the CPU ones,
// device pointers throughout, work queued on `stream`. Output code buffers
// must be zero-filled before encode and padded to a multiple of 4 bytes
// (partial bytes shared between groups are OR-ed with 32-bit atomics).
// Encode kernels record the first problem in `*status` (device memory,
// initialized to kOk by the caller).
#pragma once

#include <cuda_runtime_api.h>

#include "actkit/kernels/bitfield.h"
#include "actkit/kernels/pergroup.h"

namespace actkit::kernels {

cudaError_t pergroup_encode_cuda(const PerGroupEncodeArgs& args, int32_t* status, cudaStream_t stream);
cudaError_t pergroup_decode_cuda(const PerGroupDecodeArgs& args, cudaStream_t stream);

cudaError_t bitfield_encode_cuda(const void* values, IntType type, int64_t count, int bits, uint8_t* out,
                                 int32_t* status, cudaStream_t stream);
cudaError_t bitfield_encode_positive_cuda(const void* values, FloatType type, int64_t count, uint8_t* out,
                                          cudaStream_t stream);
cudaError_t bitfield_decode_cuda(const uint8_t* in, int64_t count, int bits, void* out, IntType type,
                                 cudaStream_t stream);

}  // namespace actkit::kernels
