// Helpers shared by the test files.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
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

// Bytes this process has read through read/pread so far (/proc/self/io's
// rchar), or -1 where the kernel does not count them: a test that a reader
// reads only what it needs compares two of these.
inline int64_t bytes_read_by_process() {
  FILE* f = std::fopen("/proc/self/io", "r");
  if (f == nullptr) return -1;
  long long rchar = -1;
  char line[128];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "rchar: %lld", &rchar) == 1) break;
  }
  std::fclose(f);
  return rchar;
}

// Writes a .safetensors file at `path` holding the F32 tensor "small" (4
// values) and, after it, the U8 tensor `big_name` of `big_bytes` bytes,
// which is left a hole (the file is only extended), so that it costs no
// disk and reading it is measurable.
inline void write_sparse_safetensors(const std::string& path, const std::string& big_name, uint64_t big_bytes) {
  const std::string header = "{\"small\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"" + big_name +
                             "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(big_bytes) +
                             "],\"data_offsets\":[16," + std::to_string(16 + big_bytes) + "]}}";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(char((uint64_t(header.size()) >> (8 * i)) & 0xff));
  bytes += header;
  const float small[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  bytes.append(reinterpret_cast<const char*>(small), sizeof small);
  files::write_file_atomic(path, bytes.data(), bytes.size());
  files::resize_file(path, bytes.size() + big_bytes);
}

}  // namespace actkit::test
