// Helpers shared by the test files.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "actkit/core/compressed_tensor.h"

namespace actkit::test {

// The payload's meaningful bytes (metadata + codes), copied to the host.
inline std::vector<uint8_t> payload_bytes(const CompressedTensor& ct) {
  const at::Tensor host = ct.payload().cpu();
  std::vector<uint8_t> out(size_t(ct.byte_size()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr<uint8_t>(), out.size());
  return out;
}

// True when both tensors have the same dtype, shape and bytes (NaN == NaN).
inline bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) return false;
  const at::Tensor ca = a.contiguous().cpu();
  const at::Tensor cb = b.contiguous().cpu();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.nbytes())) == 0;
}

}  // namespace actkit::test
