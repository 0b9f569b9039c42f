// Helpers shared by the test files.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "actkit/core/compressed_tensor.h"
#include "actkit/core/files.h"
#include "actkit/kernels/tah.h"

namespace actkit::test {

// The payload's meaningful bytes (metadata + codes), copied to the host.
inline std::vector<uint8_t> payload_bytes(const CompressedTensor& ct) {
  const at::Tensor host = ct.payload().cpu();
  std::vector<uint8_t> out(size_t(ct.byte_size()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr<uint8_t>(), out.size());
  return out;
}

// The byte layout of a TAH-Quant payload (kernels/tah.h), from its metadata.
inline kernels::TahLayout tah_layout_of(const CompressedTensor& ct) {
  const CompressedMeta& m = ct.meta();
  kernels::TahLayout L;
  L.num_tokens = m.num_tokens();
  L.channels = m.shape.back();
  L.group_size = m.group_size;
  L.high_bits = m.bits;
  L.low_bits = m.low_bits;
  L.high_tokens = m.high_tokens;
  return L;
}

// True when both tensors have the same dtype, shape and bytes (NaN == NaN).
inline bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) return false;
  const at::Tensor ca = a.contiguous().cpu();
  const at::Tensor cb = b.contiguous().cpu();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.nbytes())) == 0;
}

// max |actual - expected| / max |expected|: one scale for the whole output,
// so outputs near zero do not inflate it.
inline double max_relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  const double scale = expected.abs().max().item<double>();
  const double diff = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

// The python of the oracle tests: $ACTKIT_ORACLE_PYTHON when set, else the
// one CMake found (`configured`, may be empty).
inline std::string oracle_python(const char* configured) {
  const char* env = std::getenv("ACTKIT_ORACLE_PYTHON");
  return env != nullptr && *env != '\0' ? env : configured;
}

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/actkit-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { files::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace actkit::test
