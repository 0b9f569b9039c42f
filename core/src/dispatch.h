// Private glue between ATen tensors and the raw-pointer kernels: dtype
// mapping and the CUDA backend. Only this layer touches ATen's CUDA API.
#pragma once

#include <ATen/core/Tensor.h>

#include "actkit/core/compressed_tensor.h"
#include "actkit/kernels/bitfield.h"
#include "actkit/kernels/directq.h"
#include "actkit/kernels/pergroup.h"
#include "actkit/kernels/tah.h"

namespace actkit::detail {

// Kernel element types; throw InvalidInput naming `what` for other dtypes.
kernels::FloatType float_type_of(at::ScalarType t, const char* what);
kernels::IntType int_type_of(at::ScalarType t, const char* what);

// Throws InvalidInput unless `t` is defined and on CPU or CUDA.
void check_device(const at::Tensor& t, const char* what);

// Payload bytes are allocated rounded up to this, so CUDA kernels may OR
// whole 32-bit words at the end of the code stream.
constexpr int64_t kPayloadPad = 8;
at::Tensor allocate_payload(const CompressedMeta& meta, at::Device device);

// Decode samples [begin, end) of `ct` into `out`, already checked to be a
// contiguous tensor of that many samples with ct's dtype and device
// (begin = 0, end = num_samples() decodes everything).
void decode_per_group(const CompressedTensor& ct, int64_t begin, int64_t end, at::Tensor& out);
void decode_bitfield(const CompressedTensor& ct, int64_t begin, int64_t end, at::Tensor& out);
// Decode a whole DirectQ / TAH payload into `out` (checked as above).
// decode_tah throws FormatError when, on CPU, the token map does not hold
// exactly high_tokens ones.
void decode_directq(const CompressedTensor& ct, at::Tensor& out);
void decode_tah(const CompressedTensor& ct, at::Tensor& out);

// The kernels' view of a TAH meta (already validated).
kernels::TahLayout tah_layout(const CompressedMeta& meta);

// Check the bytes of a payload (host memory, meta.payload_bytes() long)
// against its validated meta, beyond what sizes tell, and throw FormatError
// naming the first problem. DirectQ: scales finite and non-negative. TAH:
// tile zeros finite, scales finite and non-negative, pivots below the tile
// size and 0 on tiles not flagged, padding zero, the token map holding
// exactly high_tokens ones.
void check_directq_payload(const CompressedMeta& meta, const uint8_t* payload);
void check_tah_payload(const CompressedMeta& meta, const uint8_t* payload);

// CUDA backend. Arguments carry host pointers for the per-sample tables; the
// backend copies them to the device. Kernels run on the current stream.
// `wait_status` reads the kernel's status back (a device sync). Every
// function throws InvalidInput when ACTkit was built without CUDA.
namespace cuda {
bool available();
kernels::EncodeStatus pergroup_encode(at::Device device, kernels::PerGroupEncodeArgs args, bool wait_status);
void pergroup_decode(at::Device device, kernels::PerGroupDecodeArgs args);
kernels::EncodeStatus bitfield_encode(at::Device device, const void* values, kernels::IntType type, int64_t count,
                                      int bits, uint8_t* out, bool wait_status);
void bitfield_encode_positive(at::Device device, const void* values, kernels::FloatType type, int64_t count,
                              uint8_t* out);
void bitfield_decode(at::Device device, const uint8_t* in, int64_t count, int bits, void* out,
                     kernels::IntType type);
// DirectQ and TAH encodes always read their status back (a device sync):
// the boundary codecs report NaN/Inf as InvalidInput.
kernels::EncodeStatus directq_encode(at::Device device, const kernels::DirectQEncodeArgs& args);
void directq_decode(at::Device device, const kernels::DirectQDecodeArgs& args);
// The whole TAH encode: entropies, the token map (the same ranking as the
// CPU kernel: entropy descending, then token index), tiles.
kernels::EncodeStatus tah_encode(at::Device device, const kernels::TahEncodeArgs& args);
// Decodes without checking the token map's popcount (no sync); the kernels
// clamp ranks so a map with too many ones still decodes in bounds.
void tah_decode(at::Device device, const kernels::TahDecodeArgs& args);
}  // namespace cuda

}  // namespace actkit::detail
