// CompressedTensor: the result of every codec. It owns one byte payload on
// the tensor's device plus a small host-side description (what was encoded
// and how), decodes back to a tensor of the original shape and dtype, and
// serializes to a flat, checksummed byte buffer that can cross processes and
// disks (byte layout in docs/formats.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "actkit/kernels/common.h"

namespace actkit {

using kernels::MetaFormat;

enum class CodecKind : uint8_t {
  kPerGroup = 1,  // per-group stochastic quantization (ActNN §4.1; docs/formats.md)
  kMask = 2,      // 1 bit per value
  kIndex = 3,     // small unsigned integers, 1..8 bits per value
  kDirectQ = 4,   // symmetric max-abs quantization of a pipeline boundary (boundary_codecs.h)
  kTah = 5,       // tile-wise adaptive Hadamard quantization of activations (boundary_codecs.h)
  kRaw = 6,       // the values themselves, fp32 / fp16 / bf16 (raw_codec.h)
};

const char* to_string(CodecKind kind);

// What a payload holds; enough to size, decode and validate it.
struct CompressedMeta {
  CodecKind kind = CodecKind::kPerGroup;
  at::ScalarType dtype = at::kFloat;  // dtype that decode() returns
  std::vector<int64_t> shape;
  // Bits per value; 0 when sample_bits is used. TAH: the bits of the
  // high-entropy tokens (low_bits has the others').
  int bits = 0;
  std::vector<uint8_t> sample_bits;  // per-sample bits (per-group codec only)
  int group_size = 0;                // per-group codec and TAH (tile size) only
  // Format of the 16-bit group metadata: per-group codec (bf16 or fp16) and
  // TAH (fp16 always); bf16, the default, for the other codecs.
  MetaFormat meta_format = MetaFormat::kBFloat16;
  bool per_channel = false;  // DirectQ only: one scale per index of the last dimension
  bool full_grid = false;    // DirectQ only: all 2^bits levels instead of 2^bits - 1 around zero
  int low_bits = 0;          // TAH only: bits of the low-entropy tokens, 1..bits
  int64_t high_tokens = 0;   // TAH only: how many tokens are coded at `bits`

  int64_t numel() const;
  // Per-group view: N = shape[0] for rank >= 2, else 1; D = numel / N.
  int64_t num_samples() const;
  int64_t sample_size() const;
  int64_t num_groups() const;
  // DirectQ: fp32 scales (1, or shape.back() per channel); 0 otherwise.
  int64_t num_scales() const;
  // TAH view: tokens are the rows of the last dimension (C = shape.back()).
  int64_t num_tokens() const;
  // Bytes of metadata (per-group: 4 per group; DirectQ: the scales; TAH:
  // tile parameters, pivots, tile flags and token map) and of the codes.
  int64_t meta_bytes() const;
  int64_t code_bytes() const;
  int64_t payload_bytes() const { return meta_bytes() + code_bytes(); }
  // Bytes an encoder allocates for the payload: payload_bytes() rounded up
  // to a multiple of 8 (the kernels read and write whole 8-byte words).
  int64_t allocated_bytes() const { return (payload_bytes() + 7) / 8 * 8; }
  // Bit offset of each sample's codes (per-sample bits only).
  std::vector<int64_t> sample_bit_offsets() const;

  // Throws FormatError naming the first inconsistency (bits out of range,
  // dtype not allowed for the codec, negative dims, size overflow, ...).
  void validate() const;

 private:
  void validate_directq() const;
  void validate_tah() const;
  void check_no_boundary_fields() const;
};

class CompressedTensor {
 public:
  CompressedTensor() = default;

  // Wraps an existing payload. `payload` must be a contiguous uint8 tensor
  // holding at least meta.payload_bytes() bytes (kernels may pad it).
  // Throws FormatError if `meta` is invalid or the payload too small.
  CompressedTensor(CompressedMeta meta, at::Tensor payload);

  bool defined() const { return payload_.defined(); }
  const CompressedMeta& meta() const { return meta_; }
  CodecKind kind() const { return meta_.kind; }
  const std::vector<int64_t>& shape() const { return meta_.shape; }
  at::ScalarType dtype() const { return meta_.dtype; }
  at::Device device() const;
  int64_t numel() const { return meta_.numel(); }
  // Uniform bits per value, or 0 when bits vary per sample (TAH: the
  // high-entropy tokens' bits; see meta().low_bits).
  int bits() const { return meta_.bits; }
  const std::vector<uint8_t>& sample_bits() const { return meta_.sample_bits; }
  // Code bits per value, averaged over all values (metadata excluded).
  double average_bits() const;
  // Bytes the payload takes in memory: metadata + codes.
  int64_t byte_size() const { return meta_.payload_bytes(); }
  // The payload: uint8, on device(), metadata first, then the code stream.
  const at::Tensor& payload() const { return payload_; }

  // Decodes to a contiguous tensor of shape() and dtype() on device().
  // Throws InvalidInput if undefined.
  at::Tensor decode() const;

  // Decodes into `out`, which must be a contiguous tensor of shape(),
  // dtype() on device() (reusing a buffer avoids an allocation per decode).
  // Throws InvalidInput if it is not, or if this tensor is undefined.
  void decode_into(at::Tensor& out) const;
  // Decodes samples [begin, end) (slices along dim 0) to a contiguous
  // tensor of shape (end - begin, shape()[1:]...): the same values as
  // decode().narrow(0, begin, end - begin) without decoding the rest, so
  // backward passes can work through a batch a few samples at a time.
  // Throws InvalidInput if undefined, if rank < 2 or the range is empty or
  // outside [0, shape()[0]).
  at::Tensor decode_samples(int64_t begin, int64_t end) const;

  // Copy of this tensor with the payload on `device`.
  CompressedTensor to(at::Device device) const;

  // Exact size of serialize()'s output.
  size_t serialized_size() const;
  // Writes the serialized form into dst[0, capacity); throws InvalidInput if
  // capacity < serialized_size(). Returns the bytes written.
  size_t serialize_into(uint8_t* dst, size_t capacity) const;
  std::vector<uint8_t> serialize() const;

  // Parses a buffer written by serialize(). Never reads outside
  // data[0, size). Throws FormatError if the buffer is truncated, has
  // trailing bytes, fails its checksum or describes an invalid tensor.
  static CompressedTensor deserialize(const uint8_t* data, size_t size, at::Device device = at::kCPU);
  static CompressedTensor deserialize(const std::vector<uint8_t>& bytes, at::Device device = at::kCPU) {
    return deserialize(bytes.data(), bytes.size(), device);
  }

 private:
  // Samples [begin, end) into `out` (already checked).
  void decode_range(int64_t begin, int64_t end, at::Tensor& out) const;

  CompressedMeta meta_;
  at::Tensor payload_;
};

}  // namespace actkit
