// TAH-Quant kernels: tile-wise adaptive Hadamard quantization of activations
// (TAH-Quant §3; design §4.7). The payload layout, the argument blocks and
// the CPU entry points; the CUDA entry points are in cuda.h.
//
// The input is T tokens of C channels (the rows of its last dimension). Each
// token is cut into C / G tiles of G contiguous channels. A token is coded
// at high_bits or low_bits (the token map says which); every tile has its
// own fp16 zero and scale, and tiles holding an outlier are stored after a
// pivot swap and a normalized Hadamard transform (tah_math.h).
//
// Payload sections, in order, each starting on a multiple of 8 bytes
// (docs/formats.md has the byte-level description):
//   params      4 * tiles   per tile: fp16 zero, fp16 scale
//   pivots      tiles       per tile: the swapped element (0 unless flagged)
//   tile flags  tiles bits  1 = the tile is stored transformed
//   token map   T bits      1 = the token is coded at high_bits
//   codes       per token in order, C codes of its bits, LSB-first; token t
//               starts at byte C * (t * low + r * (high - low)) / 8 where r
//               is the number of high tokens before t
// Bit i of a bit section is bit i % 8 of its byte i / 8. Padding is zero.
#pragma once

#include "actkit/kernels/common.h"
#include "actkit/kernels/counter_rng.h"

namespace actkit::kernels {

// Largest tile; a tile's pivot index fits one byte.
constexpr int32_t kTahMaxGroupSize = 256;

ACTKIT_HD int64_t round_up8(int64_t n) { return (n + 7) / 8 * 8; }

struct TahLayout {
  int64_t num_tokens = 0;    // T
  int64_t channels = 0;      // C, a multiple of group_size
  int32_t group_size = 64;   // G, a power of two in [8, 256]
  int32_t high_bits = 4;
  int32_t low_bits = 3;
  int64_t high_tokens = 0;   // tokens coded at high_bits

  ACTKIT_HD int64_t tiles_per_token() const { return channels / group_size; }
  ACTKIT_HD int64_t num_tiles() const { return num_tokens * tiles_per_token(); }
  ACTKIT_HD int64_t map_words() const { return (num_tokens + 63) / 64; }

  ACTKIT_HD int64_t params_offset() const { return 0; }
  ACTKIT_HD int64_t pivots_offset() const { return round_up8(4 * num_tiles()); }
  ACTKIT_HD int64_t flags_offset() const { return pivots_offset() + round_up8(num_tiles()); }
  ACTKIT_HD int64_t map_offset() const { return flags_offset() + 8 * ((num_tiles() + 63) / 64); }
  ACTKIT_HD int64_t codes_offset() const { return map_offset() + 8 * map_words(); }
  ACTKIT_HD int64_t code_bytes() const {
    return channels * ((num_tokens - high_tokens) * low_bits + high_tokens * high_bits) / 8;
  }
  ACTKIT_HD int64_t total_bytes() const { return codes_offset() + code_bytes(); }

  // Byte offset (from the payload start) of token t's codes, `rank` high
  // tokens coming before it.
  ACTKIT_HD int64_t token_codes_offset(int64_t t, int64_t rank) const {
    return codes_offset() + channels * (t * low_bits + rank * (high_bits - low_bits)) / 8;
  }
};

struct TahEncodeArgs {
  const void* input = nullptr;  // T * C contiguous values of `input_type`
  FloatType input_type = FloatType::kFloat32;
  TahLayout layout;
  float tau = 2.0f;       // a tile is an outlier tile when max / (second + rho) > tau
  bool hadamard = true;   // false: no tile is transformed (plain tile-wise quantization)
  // Stochastic rounding instead of round-to-nearest: the value at (token t,
  // channel k) as coded (after any transform) draws counter_uniform(key,
  // t * C + k), the same on every device and work split.
  bool stochastic = false;
  RngKey key;
  uint8_t* payload = nullptr;  // layout.total_bytes(), zero-filled by the caller
};

struct TahDecodeArgs {
  const uint8_t* payload = nullptr;
  TahLayout layout;
  void* output = nullptr;  // T * C contiguous values of `output_type`
  FloatType output_type = FloatType::kFloat32;
};

// CPU kernels, parallel over tokens with TBB.
// Encode: entropies, the token map (the layout.high_tokens tokens of highest
// entropy, ties to the lower token index), then the tiles. Returns kOk,
// kNonFinite for NaN/Inf input, or kMetaOverflow when a tile's zero or
// scale does not fit fp16 (the payload is then unspecified).
EncodeStatus tah_encode_cpu(const TahEncodeArgs& args);
// Decode. Returns false, writing nothing, when the token map does not hold
// exactly layout.high_tokens ones. Pivots are read modulo G, so a payload
// that was not validated still decodes inside its buffers.
bool tah_decode_cpu(const TahDecodeArgs& args);
// Entropy of each token (the ranking key; tah_math.h) into entropy[T].
// Returns kNonFinite for NaN/Inf input.
EncodeStatus tah_entropy_cpu(const void* input, FloatType type, int64_t num_tokens, int64_t channels,
                             float* entropy);

}  // namespace actkit::kernels
