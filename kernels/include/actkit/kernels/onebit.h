// Kernels of the 1-bit codec of 1-bit Adam and 1-bit LAMB (design §4.8; the
// byte layout and the error feedback are in comm/onebit_codec.h, which
// checks its tensors and calls these). A chunk of n values (a multiple of 8)
// travels as one fp32 scale, sqrt(sum (x+e)^2 / n), then n sign bits.
//
// The sum of squares is formed in doubles in a fixed order that depends on n
// only (blocks of 4096 values, each in 8 lanes, then the blocks in order), so
// the scale is the same for every thread count and instruction set.
#pragma once

#include <cstdint>

namespace actkit::kernels {

// Encodes x + error (n values each, n >= 0 a multiple of 8: the caller
// checks; comm/onebit_codec.cpp throws otherwise) into out (4 + n/8 bytes) and writes
// x + error - decode(out) to new_error, which may be `error` itself (x may
// not alias either). When x + error holds NaN or Inf (or the sum of squares
// overflows), writes a NaN scale and zero signs, leaves new_error untouched
// and returns false.
bool onebit_encode_cpu(const float* x, const float* error, float* new_error, int64_t n, uint8_t* out);

// Writes (or, with accumulate, adds) the n values (a multiple of 8) of an
// encoded chunk to out. Returns false, leaving out untouched, when the scale is NaN, infinite
// or negative.
bool onebit_decode_cpu(const uint8_t* bytes, int64_t n, float* out, bool accumulate);

}  // namespace actkit::kernels
