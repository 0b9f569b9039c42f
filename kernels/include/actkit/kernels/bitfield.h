// Kernels for small-integer bit fields: the 1-bit mask codec (ReLU, Dropout)
// and the index codec (MaxPool argmax, up to 8 bits). Both store `count`
// values of `bits` bits as one LSB-first bit stream of ceil(count*bits/8)
// bytes; the mask codec is the 1-bit case.
#pragma once

#include "actkit/kernels/common.h"

namespace actkit::kernels {

enum class IntType : uint8_t { kUInt8 = 0, kInt32 = 1, kInt64 = 2 };

// Packs `count` integers of `type` into `out` (ceil(count*bits/8) bytes).
// Returns kOutOfRange (output unspecified) if a value is not in [0, 2^bits).
EncodeStatus bitfield_encode_cpu(const void* values, IntType type, int64_t count, int bits,
                                 uint8_t* out);

// Writes bit (x > 0) of each of `count` floats; NaN gives 0, like ReLU's mask.
void bitfield_encode_positive_cpu(const void* values, FloatType type, int64_t count, uint8_t* out);

// Unpacks `count` values of `bits` bits into integers of `type`.
void bitfield_decode_cpu(const uint8_t* in, int64_t count, int bits, void* out, IntType type);

}  // namespace actkit::kernels
