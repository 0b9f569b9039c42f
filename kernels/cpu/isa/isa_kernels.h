// The table of one instruction-set variant of the CPU kernels. The files in
// this folder are compiled once per variant (kernels/CMakeLists.txt), each
// time inside namespace actkit::kernels::ACTKIT_CPU_ISA with that variant's
// flags; the drivers (kernels/cpu/*_cpu.cpp) split the work with TBB and call
// the selected variant on each range. Variant code uses no TBB and no
// standard-library templates, so nothing compiled for one instruction set can
// be shared with another at link time (scripts/check-isa-symbols.sh).
//
// Contracts common to every entry: ranges are half-open and inside the
// arguments' layout; concurrent calls on disjoint ranges are safe (shared
// output bytes are OR-ed atomically, bitpack.h).
#pragma once

#include <cstdint>

#include "actkit/kernels/bitfield.h"
#include "actkit/kernels/directq.h"
#include "actkit/kernels/pergroup.h"
#include "actkit/kernels/tah.h"

namespace actkit::kernels::cpu {

// Per-task scratch of the TAH encoder, C channels and K tiles per token.
struct TahScratch {
  float* values = nullptr;       // C: fp16/bf16 input as float (unused for fp32)
  uint8_t* q = nullptr;          // C: codes, one per byte
  float* transformed = nullptr;  // C: outlier tiles after the transform
  float* mn = nullptr;           // K: each tile's extremes as coded
  float* mx = nullptr;           // K
  int32_t* pivot = nullptr;      // K: -1 when not transformed
};

// DirectQ's drivers hand out element ranges that start on a multiple of this
// (so on whole bytes of the code stream at every bit width).
constexpr int64_t kDirectQRun = 4096;
// The 1-bit codec sums its squares in blocks of this many values (a multiple
// of 8): each block in 8 double lanes, then the blocks in order. The order is
// fixed by the block size alone, so every split and variant gives one scale.
constexpr int64_t kOneBitBlock = 4096;

struct IsaKernels {
  // Groups [g0, g1). kOk or the first problem found.
  EncodeStatus (*pergroup_encode)(const PerGroupEncodeArgs& a, int64_t g0, int64_t g1);
  void (*pergroup_decode)(const PerGroupDecodeArgs& a, int64_t g0, int64_t g1);
  // Elements [begin, end), begin a multiple of kDirectQRun.
  uint32_t (*directq_max_abs)(const DirectQEncodeArgs& a, int64_t begin, int64_t end);  // max |x| bits
  void (*directq_channel_max)(const DirectQEncodeArgs& a, int64_t begin, int64_t end, uint32_t* maxima);
  void (*directq_quantize)(const DirectQEncodeArgs& a, const float* inv_step, int64_t begin, int64_t end);
  void (*directq_decode)(const DirectQDecodeArgs& a, const float* step, int64_t begin, int64_t end);
  // Tokens [t0, t1). tah_entropy: false on NaN/Inf. tah_encode: false when a
  // tile's zero or scale does not fit fp16. ranks: word_ranks of the map.
  bool (*tah_entropy)(const void* input, FloatType type, int64_t channels, int64_t t0, int64_t t1, float* entropy,
                     float* buf);
  bool (*tah_encode)(const TahEncodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1, const TahScratch& s);
  void (*tah_decode)(const TahDecodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1);
  // Values [begin, begin + len), begin a multiple of 8.
  bool (*bitfield_encode)(const void* values, IntType type, int64_t begin, int64_t len, int bits, uint8_t* out);
  void (*bitfield_encode_positive)(const void* values, FloatType type, int64_t begin, int64_t len, uint8_t* out);
  void (*bitfield_decode)(const uint8_t* in, int64_t begin, int64_t len, int bits, void* out, IntType type);
  // One block of at most kOneBitBlock values (a multiple of 8): sum of (x+e)^2.
  double (*onebit_block_sum)(const float* x, const float* e, int64_t n);
  // n values (a multiple of 8): signs of x+e, and new_error = x+e - ±scale.
  void (*onebit_signs)(const float* x, const float* e, float* new_error, float scale, int64_t n, uint8_t* signs);
  void (*onebit_decode)(const uint8_t* signs, float scale, int64_t n, float* out, bool accumulate);
};

// The selected variant's table (kernels/cpu/cpu_isa.cpp).
const IsaKernels& isa_kernels();

}  // namespace actkit::kernels::cpu

// Each variant's table, defined by isa/table.cpp compiled in that variant.
namespace actkit::kernels::isa_scalar {
const cpu::IsaKernels& table();
}
namespace actkit::kernels::isa_avx2 {
const cpu::IsaKernels& table();
}
namespace actkit::kernels::isa_avx512 {
const cpu::IsaKernels& table();
}
