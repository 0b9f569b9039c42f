// The entries of one variant's table (isa_kernels.h), declared inside the
// variant's namespace. Included only by the files of this folder.
#pragma once

#include "isa_kernels.h"

#if !defined(ACTKIT_CPU_ISA)
#error "kernels/cpu/isa/ is compiled only as an instruction-set variant (ACTKIT_CPU_ISA)"
#endif

namespace actkit::kernels::ACTKIT_CPU_ISA {

EncodeStatus pergroup_encode(const PerGroupEncodeArgs& a, int64_t g0, int64_t g1);
void pergroup_decode(const PerGroupDecodeArgs& a, int64_t g0, int64_t g1);
uint32_t directq_max_abs(const DirectQEncodeArgs& a, int64_t begin, int64_t end);
void directq_channel_max(const DirectQEncodeArgs& a, int64_t begin, int64_t end, uint32_t* maxima);
void directq_quantize(const DirectQEncodeArgs& a, const float* inv_step, int64_t begin, int64_t end);
void directq_decode(const DirectQDecodeArgs& a, const float* step, int64_t begin, int64_t end);
bool tah_entropy(const void* input, FloatType type, int64_t channels, int64_t t0, int64_t t1, float* entropy,
                     float* buf);
bool tah_encode(const TahEncodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1, const cpu::TahScratch& s);
void tah_decode(const TahDecodeArgs& a, const int64_t* ranks, int64_t t0, int64_t t1);
bool bitfield_encode(const void* values, IntType type, int64_t begin, int64_t len, int bits, uint8_t* out);
void bitfield_encode_positive(const void* values, FloatType type, int64_t begin, int64_t len, uint8_t* out);
void bitfield_decode(const uint8_t* in, int64_t begin, int64_t len, int bits, void* out, IntType type);
double onebit_block_sum(const float* x, const float* e, int64_t n);
void onebit_signs(const float* x, const float* e, float* new_error, float scale, int64_t n, uint8_t* signs);
void onebit_decode(const uint8_t* signs, float scale, int64_t n, float* out, bool accumulate);

}  // namespace actkit::kernels::ACTKIT_CPU_ISA
