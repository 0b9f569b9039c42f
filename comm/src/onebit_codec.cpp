// The 1-bit codec (see the header): the tensors are checked here, the
// arithmetic is the CPU kernel's (kernels/onebit.h), parallel over blocks.
#include "actkit/comm/onebit_codec.h"

#include <c10/util/StringUtil.h>

#include <cstring>

#include "actkit/core/errors.h"
#include "actkit/kernels/onebit.h"

namespace actkit {
namespace {

void check_values(const at::Tensor& t, const char* what, const char* name) {
  if (t.scalar_type() != at::kFloat || !t.device().is_cpu() || !t.is_contiguous()) {
    throw InvalidInput(c10::str(what, ": ", name, " must be a contiguous fp32 CPU tensor, got ", t.scalar_type(), " on ",
                                t.device(), t.is_contiguous() ? "" : " (non-contiguous)"));
  }
  if (t.numel() % 8 != 0) {
    throw InvalidInput(c10::str(what, ": ", name, " holds ", t.numel(), " values, not a multiple of 8"));
  }
}

}  // namespace

int64_t onebit_chunk_bytes(int64_t n) { return 4 + n / 8; }

float onebit_scale(const uint8_t* bytes) {
  float s;
  std::memcpy(&s, bytes, sizeof s);  // little-endian hosts only (checked at build: x86-64, aarch64)
  return s;
}

bool onebit_encode(const at::Tensor& x, at::Tensor& error, uint8_t* out) { return onebit_encode(x, error, error, out); }

bool onebit_encode(const at::Tensor& x, const at::Tensor& error, at::Tensor& new_error, uint8_t* out) {
  check_values(x, "onebit_encode", "the input");
  check_values(error, "onebit_encode", "the error");
  check_values(new_error, "onebit_encode", "the new error");
  if (error.numel() != x.numel() || new_error.numel() != x.numel()) {
    throw InvalidInput(c10::str("onebit_encode: the errors hold ", error.numel(), " and ", new_error.numel(),
                                " values, the input ", x.numel()));
  }
  return kernels::onebit_encode_cpu(x.data_ptr<float>(), error.data_ptr<float>(), new_error.data_ptr<float>(),
                                    x.numel(), out);
}

bool onebit_decode(const uint8_t* bytes, at::Tensor& out, bool accumulate) {
  check_values(out, "onebit_decode", "the output");
  return kernels::onebit_decode_cpu(bytes, out.numel(), out.data_ptr<float>(), accumulate);
}

}  // namespace actkit
