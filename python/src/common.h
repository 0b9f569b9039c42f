// What the Python front's operator files share: error translation and the
// description of a per-group payload.
#pragma once

#include <c10/util/Exception.h>

#include "actkit/core/compressed_tensor.h"
#include "actkit/core/errors.h"

namespace actkit::python {

// ACTkit's errors (actkit::Error and its kinds) reach Python as RuntimeError
// with their message: every operator and class method runs its body through
// translated().
template <typename F>
auto translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const actkit::Error& e) {
    TORCH_CHECK(false, "actkit: ", e.what());
  }
}

// What a pack() of `shape` with these settings holds, as the codec describes it.
inline CompressedMeta per_group_meta(c10::IntArrayRef shape, at::ScalarType dtype, int64_t bits, int64_t group_size,
                                     c10::IntArrayRef sample_bits) {
  CompressedMeta meta;
  meta.kind = CodecKind::kPerGroup;
  meta.dtype = dtype;
  meta.shape.assign(shape.begin(), shape.end());
  meta.group_size = int(group_size);
  if (sample_bits.empty()) {
    meta.bits = int(bits);
  } else {
    for (int64_t b : sample_bits) meta.sample_bits.push_back(uint8_t(b));
  }
  return meta;
}

}  // namespace actkit::python
