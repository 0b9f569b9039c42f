// CUDA entry points of the kernels: same argument blocks as the CPU ones,
// device pointers throughout, work queued on `stream`. Output code buffers
// must be zero-filled before encode and padded to a multiple of 4 bytes
// (partial bytes shared between groups are OR-ed with 32-bit atomics).
// Encode kernels record the first problem in `*status` (device memory,
// initialized to kOk by the caller).
#pragma once

#include <cuda_runtime_api.h>

#include "actkit/kernels/bitfield.h"
#include "actkit/kernels/directq.h"
#include "actkit/kernels/pergroup.h"
#include "actkit/kernels/tah.h"

namespace actkit::kernels {

cudaError_t pergroup_encode_cuda(const PerGroupEncodeArgs& args, int32_t* status, cudaStream_t stream);
cudaError_t pergroup_decode_cuda(const PerGroupDecodeArgs& args, cudaStream_t stream);

cudaError_t bitfield_encode_cuda(const void* values, IntType type, int64_t count, int bits, uint8_t* out,
                                 int32_t* status, cudaStream_t stream);
cudaError_t bitfield_encode_positive_cuda(const void* values, FloatType type, int64_t count, uint8_t* out,
                                          cudaStream_t stream);
cudaError_t bitfield_decode_cuda(const uint8_t* in, int64_t count, int bits, void* out, IntType type,
                                 cudaStream_t stream);

// DirectQ: reduces the scales into args.scales (zero-filled), then writes
// the codes (no zero-fill needed); a non-finite scale sets kNonFinite.
cudaError_t directq_encode_cuda(const DirectQEncodeArgs& args, int32_t* status, cudaStream_t stream);
cudaError_t directq_decode_cuda(const DirectQDecodeArgs& args, cudaStream_t stream);

// TAH-Quant, in the order the encode runs them. The token selection between
// the entropies and the map is done by the caller (a stable descending sort
// of `entropy`: the CPU kernel's order). `token_high` holds one byte per
// token (nonzero: high bits); `ranks` has layout.map_words() + 1 entries.
cudaError_t tah_entropy_cuda(const TahEncodeArgs& args, float* entropy, int32_t* status, cudaStream_t stream);
cudaError_t tah_pack_map_cuda(const uint8_t* token_high, const TahLayout& layout, uint8_t* payload,
                              cudaStream_t stream);
cudaError_t tah_word_ranks_cuda(const uint8_t* payload, const TahLayout& layout, int64_t* ranks, cudaStream_t stream);
cudaError_t tah_encode_tiles_cuda(const TahEncodeArgs& args, const int64_t* ranks, int32_t* status,
                                  cudaStream_t stream);
cudaError_t tah_decode_cuda(const TahDecodeArgs& args, const int64_t* ranks, cudaStream_t stream);

}  // namespace actkit::kernels
