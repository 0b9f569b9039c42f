// Private glue between ATen tensors and the raw-pointer kernels: dtype
// mapping and the CUDA backend. Only this layer touches ATen's CUDA API.
#pragma once

#include <ATen/core/Tensor.h>

#include "actkit/core/compressed_tensor.h"
#include "actkit/kernels/bitfield.h"
#include "actkit/kernels/pergroup.h"

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
}  // namespace cuda

}  // namespace actkit::detail
