// What crosses a stage boundary: the activations a stage sends forward and
// the gradients it sends back, encoded by one of the boundary codecs and
// serialized in CompressedTensor's checksummed format (docs/formats.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "actkit/kernels/common.h"

namespace actkit::pipeline {

using kernels::DirectQGrid;

struct BoundaryCodec {
  enum Kind { kFp32, kFp16, kDirectQ, kTah, kAqsgd } kind = kFp32;
  // directq, aqsgd: bits per value, 2..8. tah: the high-entropy tokens' bits, 2..8
  // (the other tokens get one bit less). fp32 / fp16: 0.
  int bits = 0;
  bool stochastic = false;   // directq, tah, aqsgd: unbiased stochastic rounding instead of round-to-nearest
  bool per_channel = false;  // directq: one scale per hidden channel instead of one per tensor (aqsgd: always)
  // directq, aqsgd: 2^bits - 1 levels with zero exact (symmetric), or the
  // papers' 2^bits levels (full).
  DirectQGrid grid = DirectQGrid::kSymmetric;
  int tah_group = 64;        // tah: tile size (the authors' code's default; the paper's main results use 32)
  double tah_high_fraction = 0.8;  // tah: share of tokens at the higher bits

  // "fp32", "fp16", "directq4", "directq2-sr-channel-full", "tah4/3-g64-p0.8", "aqsgd2", ...
  std::string describe() const;
};

// "symmetric", "full".
const char* to_string(DirectQGrid grid);
// Throws InvalidInput naming the accepted values.
DirectQGrid parse_directq_grid(const std::string& name);

// "fp32", "fp16", "directq", "tah", "aqsgd": the names parse_boundary_codec takes.
const char* to_string(BoundaryCodec::Kind kind);

// `name`: fp32 | fp16 | directq | tah | aqsgd; `bits` as in BoundaryCodec (ignored
// for fp32/fp16). Throws InvalidInput naming what is wrong.
BoundaryCodec parse_boundary_codec(const std::string& name, int bits);

// What a user chooses for a boundary (the flags of `actkit pipeline`).
struct BoundaryChoice {
  std::string codec = "fp32";  // fp32 | fp16 | directq | tah | aqsgd
  int fw_bits = 4, bw_bits = 8;
  bool stochastic = false;     // every compressed codec's rounding: activations and DirectQ gradients
  DirectQGrid grid = DirectQGrid::kSymmetric;  // directq and aqsgd activations
  bool fw_per_channel = false;                 // directq activations (aqsgd: always per channel)
  bool bw_per_channel = false;                 // DirectQ gradients
  int tah_group = 0;               // tah: the tile size; 0: not given (64)
  double tah_high_fraction = -1;   // tah: the high-bit share; < 0: not given (0.8)
};

// Both directions of a boundary from the user's choice: compressed
// activations (directq, tah, aqsgd) go with DirectQ gradients at `bw_bits`
// (as AQ-SGD and TAH-Quant send them), on the symmetric grid (zero exact:
// sparse gradients stay sparse); fp32 and fp16 send gradients as they send
// activations. tah rounds to nearest. The one place this rule lives.
// Throws InvalidInput for bits out of range, a TAH tile that is not a power
// of two in 8..256, a high-token share outside [0, 1], a TAH option given to
// another codec, a DirectQ option given to a codec that has no DirectQ in
// that direction, or stochastic rounding with fp32 / fp16 (nothing rounds).
struct BoundaryCodecs {
  BoundaryCodec forward, backward;
};
BoundaryCodecs boundary_codecs(const BoundaryChoice& choice);

// Encodes `x` (a float tensor) and serializes it. aqsgd encodes what it is
// given, the delta, as per-channel DirectQ (AqsgdBoundary keeps the state). `seed` drives stochastic
// rounding. Throws InvalidInput for what the codec refuses (NaN/Inf, ...).
std::vector<uint8_t> encode_boundary(const at::Tensor& x, const BoundaryCodec& codec, uint64_t seed);

// Decodes a payload from a peer to an fp32 tensor, whatever codec wrote it.
// Throws FormatError whose message starts with `where` (the boundary and
// step) for bytes that do not parse, fail their checksum, or do not hold
// `expected_shape` (when it is not empty).
at::Tensor decode_boundary(const std::vector<uint8_t>& bytes, const std::string& where,
                           const std::vector<int64_t>& expected_shape = {});

}  // namespace actkit::pipeline
