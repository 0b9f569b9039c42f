// The 1-bit codec (see the header). Two passes over the chunk: the norm,
// then the signs and the new error; x + error is recomputed in the second
// pass rather than stored, so the codec needs no scratch memory.
#include "actkit/comm/onebit_codec.h"

#include <c10/util/StringUtil.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "actkit/core/errors.h"

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
  const int64_t n = x.numel();
  const float* xp = x.data_ptr<float>();
  const float* ep = error.data_ptr<float>();
  float* np = new_error.data_ptr<float>();
  // ‖x + e‖² in four double partial sums: exact enough for any fp32 chunk,
  // and the same order every time (the reference must match bit for bit).
  double part[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; i += 4) {  // n is a multiple of 8
    for (int k = 0; k < 4; ++k) {
      const double y = double(xp[i + k] + ep[i + k]);
      part[k] += y * y;
    }
  }
  const double sum = (part[0] + part[1]) + (part[2] + part[3]);
  if (!std::isfinite(sum)) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(out, &nan, sizeof nan);
    std::memset(out + 4, 0, size_t(n / 8));
    return false;
  }
  const float scale = n > 0 ? float(std::sqrt(sum / double(n))) : 0.0f;
  std::memcpy(out, &scale, sizeof scale);
  uint8_t* signs = out + 4;
  for (int64_t j = 0; j < n / 8; ++j) {
    uint8_t byte = 0;
    for (int k = 0; k < 8; ++k) {
      const int64_t i = 8 * j + k;
      const float y = xp[i] + ep[i];
      const bool positive = y >= 0.0f;  // sign(0) = +1
      byte |= uint8_t(positive) << k;
      np[i] = y - (positive ? scale : -scale);  // ep[i] is not read again: np may alias it
    }
    signs[j] = byte;
  }
  return true;
}

bool onebit_decode(const uint8_t* bytes, at::Tensor& out, bool accumulate) {
  check_values(out, "onebit_decode", "the output");
  const float scale = onebit_scale(bytes);
  if (!std::isfinite(scale) || scale < 0) return false;
  const int64_t n = out.numel();
  float* op = out.data_ptr<float>();
  const uint8_t* signs = bytes + 4;
  // Two loops without a branch inside, so both vectorize.
  if (accumulate) {
    for (int64_t j = 0; j < n / 8; ++j) {
      const uint8_t byte = signs[j];
      for (int k = 0; k < 8; ++k) op[8 * j + k] += (byte >> k) & 1 ? scale : -scale;
    }
  } else {
    for (int64_t j = 0; j < n / 8; ++j) {
      const uint8_t byte = signs[j];
      for (int k = 0; k < 8; ++k) op[8 * j + k] = (byte >> k) & 1 ? scale : -scale;
    }
  }
  return true;
}

}  // namespace actkit
