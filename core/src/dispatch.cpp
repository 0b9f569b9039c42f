#include "dispatch.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit::detail {

kernels::FloatType float_type_of(at::ScalarType t, const char* what) {
  switch (t) {
    case at::kFloat: return kernels::FloatType::kFloat32;
    case at::kHalf: return kernels::FloatType::kFloat16;
    case at::kBFloat16: return kernels::FloatType::kBFloat16;
    default:
      throw InvalidInput(c10::str(what, ": expected a float32, float16 or bfloat16 tensor, got ", t));
  }
}

kernels::IntType int_type_of(at::ScalarType t, const char* what) {
  switch (t) {
    case at::kByte: return kernels::IntType::kUInt8;
    case at::kBool: return kernels::IntType::kUInt8;  // bool is one byte, 0 or 1
    case at::kInt: return kernels::IntType::kInt32;
    case at::kLong: return kernels::IntType::kInt64;
    default: throw InvalidInput(c10::str(what, ": expected a uint8, int32 or int64 tensor, got ", t));
  }
}

void check_device(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw InvalidInput(c10::str(what, ": the tensor is undefined"));
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    throw InvalidInput(c10::str(what, ": tensors on ", t.device(), " are not supported (CPU or CUDA only)"));
  }
  if (t.device().is_cuda() && !cuda::available()) {
    throw InvalidInput(c10::str(what, ": got a CUDA tensor but ACTkit was built without CUDA"));
  }
}

at::Tensor allocate_payload(const CompressedMeta& meta, at::Device device) {
  static_assert(kPayloadPad == 8, "CompressedMeta::allocated_bytes rounds to 8");
  return at::zeros({meta.allocated_bytes()}, at::TensorOptions().dtype(at::kByte).device(device));
}

}  // namespace actkit::detail
