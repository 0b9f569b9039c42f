// The pipeline-boundary codecs (design §4.5 and §4.7; byte layouts in
// docs/formats.md): what a pipeline stage sends to the next one.
//
// * DirectQ: symmetric max-abs quantization, per tensor or per channel. The
//   "direct quantization" baseline for activations, and the quantizer of the
//   backward gradients for AQ-SGD and TAH-Quant.
// * TAH-Quant: tile-wise asymmetric quantization of activations, with more
//   bits for the tokens of highest entropy and a pivot swap + Hadamard
//   transform for tiles dominated by one outlier (TAH-Quant §3).
//
// Both decode with CompressedTensor::decode(), travel with serialize(), and
// give the same payload on CPU and CUDA for the same input and options.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "actkit/core/compressed_tensor.h"

namespace actkit {

struct DirectQOptions {
  int bits = 8;              // 2..8
  bool per_channel = false;  // one scale per index of the last dimension instead of one per tensor
  // kSymmetric: 2^bits - 1 levels, zero among them. kFull: all 2^bits levels
  // (the papers' grid), zero between two of them.
  kernels::DirectQGrid grid = kernels::DirectQGrid::kSymmetric;
  bool stochastic = false;   // unbiased stochastic rounding instead of round-to-nearest
  uint64_t seed = 0;         // the stochastic rounding stream
};

// Quantizes `x` (fp32, fp16 or bf16; any shape with at least one value; any
// strides; CPU or CUDA). With s = max |x| over the tensor (or, per channel,
// over every value whose last index is that channel):
// * symmetric grid, L = 2^(bits-1) - 1: each value becomes an integer q in
//   [-L, L] and decodes to q * s / L; zero is exact, an all-zero tensor
//   decodes to zeros. Round-to-nearest error at most s / (2L).
// * full grid, h = (2^bits - 1) / 2: each value decodes to (c - h) * s / h
//   for a code c in [0, 2^bits - 1]; round-to-nearest error at most
//   s / (2h), and zero decodes to +-s / (2h).
// Round-to-nearest by default; stochastic rounding is unbiased, with value
// i's draw a function of (seed, i) only. Scales are stored as fp32.
// Throws InvalidInput for bits outside 2..8, another dtype, an empty or
// undefined tensor, per-channel scales on a scalar, or NaN/Inf in `x`.
CompressedTensor encode_directq(const at::Tensor& x, const DirectQOptions& options);

struct TahOptions {
  int group_size = 64;          // tile size G: a power of two in [8, 256]
  int high_bits = 4;            // bits of the high-entropy tokens, 1..8
  int low_bits = 3;             // bits of the other tokens, 1..high_bits
  double high_fraction = 0.8;   // share of tokens coded at high_bits, in [0, 1]
  double tau = 2.0;             // outlier threshold on max / second-largest magnitude in a tile, >= 0
  bool hadamard = true;         // false: plain tile-wise quantization (no tile is transformed)
  bool stochastic = false;      // unbiased stochastic rounding instead of round-to-nearest
  uint64_t seed = 0;            // the stochastic rounding stream
};

// Quantizes an activation `x` (fp32, fp16 or bf16; rank >= 1; any strides;
// CPU or CUDA) whose last dimension C holds the channels of one token
// (B x S x C: B*S tokens). C must be a multiple of group_size.
// * Token bits: the entropy of p_k = |a_k| / (||a||_1 + 1e-12) over the
//   token, H = -sum p_k log(p_k + 1e-12), ranks the tokens; the
//   round(high_fraction * T) tokens of highest entropy (ties: lower token
//   index first) are coded at high_bits, the rest at low_bits.
// * Tiles: each run of group_size channels of a token has its own fp16 zero
//   and scale (asymmetric); codes round to nearest, or stochastically
//   (unbiased; value i's draw a function of (seed, i) only).
// * Outliers: a tile whose largest magnitude exceeds tau times the second
//   largest (+ 1e-12) has that element swapped to position 0 and the tile
//   replaced by its normalized Hadamard transform before quantization;
//   decode inverts both.
// Throws InvalidInput for bad options, another dtype, a scalar or empty
// tensor, C not a multiple of group_size, NaN/Inf in `x`, or a tile whose
// zero or scale does not fit fp16 (values beyond about +-65504).
CompressedTensor encode_tah(const at::Tensor& x, const TahOptions& options);

}  // namespace actkit
