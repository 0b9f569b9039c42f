// Packing of small codes (one per byte) into an LSB-first bit stream and
// back, for the CPU kernels. Code k of a run that starts at stream bit p
// occupies bits [p + k*b, p + (k+1)*b); stream bit s lives in byte s/8 at bit
// s%8.
//
// On byte-aligned runs, the 1/2/4/8-bit cases are word-wide shifts the
// compiler vectorizes, and the 3/5/6/7-bit cases move eight codes (b whole
// bytes) at a time, and pack and unpack eight such octets per vector step
// where there is AVX-512; everything else goes through a bit accumulator.
#pragma once

#include <cstdint>
#include <cstring>
#if defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "actkit/kernels/common.h"

namespace actkit::kernels::cpu {

// ORs `v` into a byte that a neighbouring run (another thread) may also touch.
ACTKIT_CPU_INLINE void atomic_or_byte(uint8_t* p, uint8_t v) {
  if (v != 0) __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}

namespace detail {

// Compacts 8 one-bit codes per 64-bit word into one byte.
ACTKIT_CPU_INLINE void pack1(const uint8_t* codes, int64_t nbytes, uint8_t* out) {
#pragma omp simd
  for (int64_t i = 0; i < nbytes; ++i) {
    uint64_t w;
    std::memcpy(&w, codes + 8 * i, 8);
    const uint64_t v = w | (w >> 7) | (w >> 14) | (w >> 21) | (w >> 28) | (w >> 35) | (w >> 42) | (w >> 49);
    out[i] = uint8_t(v);
  }
}

ACTKIT_CPU_INLINE void pack2(const uint8_t* codes, int64_t nbytes, uint8_t* out) {
#pragma omp simd
  for (int64_t i = 0; i < nbytes; ++i) {
    uint32_t w;
    std::memcpy(&w, codes + 4 * i, 4);
    out[i] = uint8_t(w | (w >> 6) | (w >> 12) | (w >> 18));
  }
}

ACTKIT_CPU_INLINE void pack4(const uint8_t* codes, int64_t nbytes, uint8_t* out) {
#pragma omp simd
  for (int64_t i = 0; i < nbytes; ++i) {
    uint16_t w;
    std::memcpy(&w, codes + 2 * i, 2);
    out[i] = uint8_t(w | (w >> 4));
  }
}

ACTKIT_CPU_INLINE void unpack1(const uint8_t* in, int64_t nbytes, uint8_t* codes) {
#pragma omp simd
  for (int64_t i = 0; i < nbytes; ++i) {
    const uint64_t v = in[i];
    const uint64_t w =
        (v | (v << 7) | (v << 14) | (v << 21) | (v << 28) | (v << 35) | (v << 42) | (v << 49)) &
        0x0101010101010101ull;
    std::memcpy(codes + 8 * i, &w, 8);
  }
}

ACTKIT_CPU_INLINE void unpack2(const uint8_t* in, int64_t nbytes, uint8_t* codes) {
#pragma omp simd
  for (int64_t i = 0; i < nbytes; ++i) {
    const uint32_t v = in[i];
    const uint32_t w = (v | (v << 6) | (v << 12) | (v << 18)) & 0x03030303u;
    std::memcpy(codes + 4 * i, &w, 4);
  }
}

ACTKIT_CPU_INLINE void unpack4(const uint8_t* in, int64_t nbytes, uint8_t* codes) {
#pragma omp simd
  for (int64_t i = 0; i < nbytes; ++i) {
    const uint32_t v = in[i];
    const uint16_t w = uint16_t((v | (v << 4)) & 0x0f0fu);
    std::memcpy(codes + 2 * i, &w, 2);
  }
}

// Eight codes of B bits (B = 3, 5, 6, 7: widths whose codes straddle bytes)
// fill exactly B bytes, so a group of eight is one little-endian word of
// 8B bits, gathered from (or spread to) eight code bytes with shifts. Where
// the run has 8 bytes left, whole words are stored and loaded (a store's
// spare high bytes are zeros that the next group overwrites); the last
// groups move exactly B bytes, so nothing outside the run is touched.
// The low `width` bits of every `lane`-bit lane of a 64-bit word.
constexpr uint64_t lane_mask(int lane, int width) {
  uint64_t m = 0;
  for (int at = 0; at < 64; at += lane) m |= ((uint64_t(1) << width) - 1) << at;
  return m;
}

// Eight B-bit codes, one per byte of w, merged into the low 8B bits (the
// bits above them zero): pairs of neighbours first (each 16-bit lane), then
// pairs of pairs, then halves. Word is uint64_t or a vector of them.
template <int B, typename Word = uint64_t>
ACTKIT_CPU_INLINE Word gather_octet(Word w) {
  constexpr uint64_t k1 = lane_mask(16, B);
  constexpr uint64_t k2 = lane_mask(32, 2 * B);
  constexpr uint64_t k4 = lane_mask(64, 4 * B);
  w = (w & k1) | ((w >> (8 - B)) & (k1 << B));
  w = (w & k2) | ((w >> (16 - 2 * B)) & (k2 << (2 * B)));
  return (w & k4) | ((w >> (32 - 4 * B)) & (k4 << (4 * B)));
}

// The inverse: the low 8B bits of v spread to one B-bit code per byte; the
// bits above them are dropped. Word is uint64_t or a vector of them.
template <int B, typename Word = uint64_t>
ACTKIT_CPU_INLINE Word spread_octet(Word v) {
  constexpr uint64_t k1 = lane_mask(16, B);
  constexpr uint64_t k2 = lane_mask(32, 2 * B);
  constexpr uint64_t k4 = lane_mask(64, 4 * B);
  v = (v & k4) | ((v << (32 - 4 * B)) & (k4 << 32));
  v = (v & k2) | ((v << (16 - 2 * B)) & (k2 << 16));
  return (v & k1) | ((v << (8 - B)) & (k1 << 8));
}

// Octets go through a small buffer of 64-bit words, kOctetBlock at a time:
// the merging (or spreading) shifts run as a vector loop over the words, and
// only the B-byte stores (or loads) at stride B, which no vector instruction
// the compiler emits can do, stay scalar. (The AVX-512 paths below move
// them with masked loads and stores and word permutes.)
constexpr int64_t kOctetBlock = 64;

#if defined(__AVX512BW__)
// For pack_octets_by_eight: the word of the lanes (lane k's words are 4k ..
// 4k + 3) that output word j takes from the lanes of parity `parity`, or -1.
// Lane k, shifted left by 8 (Bk mod 2) bits, holds octet k in the bytes it
// fills in its window of words Bk/2 ..; windows of the lanes of one parity
// do not overlap (they start B words apart), so each of the two permutes
// takes every word from at most one lane, and a word that straddles two
// octets (odd B) gets one byte from each permute.
// Eight 64-bit lanes: one octet each in the AVX-512 pack and unpack.
typedef uint64_t OctetLanes __attribute__((vector_size(64)));

// 8 (Bk mod 2) for lane k = 0..7: the bits that put octet k, which starts
// at byte Bk, at the bottom of the lane a word permute gave it (and back).
template <int B>
constexpr uint64_t octet_parity_shift(int k) {
  return uint64_t(8 * ((B * k) & 1));
}

template <int B>
constexpr OctetLanes octet_parity_shifts() {
  return OctetLanes{octet_parity_shift<B>(0), octet_parity_shift<B>(1), octet_parity_shift<B>(2),
                    octet_parity_shift<B>(3), octet_parity_shift<B>(4), octet_parity_shift<B>(5),
                    octet_parity_shift<B>(6), octet_parity_shift<B>(7)};
}

template <int B>
constexpr int octet_source_word(int parity, int j) {
  for (int k = parity; k < 8; k += 2) {
    const int first = B * k / 2;
    const int words = ((B * k & 1) + B + 1) / 2;
    if (j >= first && j < first + words) return 4 * k + (j - first);
  }
  return -1;
}

// Four consecutive entries (from output word 4L) of that table, as a lane.
template <int B>
constexpr long long octet_source_lane(int parity, int L) {
  uint64_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int w = octet_source_word<B>(parity, 4 * L + i);
    v |= uint64_t(w < 0 ? 0 : w) << (16 * i);
  }
  return (long long)v;
}

template <int B>
constexpr uint32_t octet_source_mask(int parity) {
  uint32_t m = 0;
  for (int j = 0; j < 32; ++j) m |= octet_source_word<B>(parity, j) >= 0 ? uint32_t(1) << j : 0u;
  return m;
}

// The inverse of unpack_octets_by_eight: eight octets per step, gathered in
// 64-bit lanes, each shifted to its byte parity, moved to their words by two
// zero-masking word permutes (even lanes, odd lanes) and OR-ed, then stored
// with a byte mask of exactly 8B bytes. Returns the octets done.
template <int B>
ACTKIT_CPU_INLINE int64_t pack_octets_by_eight(const uint8_t* codes, int64_t groups, uint8_t* out) {
  const OctetLanes shifts = octet_parity_shifts<B>();
  const __m512i even_words = _mm512_set_epi64(
      octet_source_lane<B>(0, 7), octet_source_lane<B>(0, 6), octet_source_lane<B>(0, 5), octet_source_lane<B>(0, 4),
      octet_source_lane<B>(0, 3), octet_source_lane<B>(0, 2), octet_source_lane<B>(0, 1), octet_source_lane<B>(0, 0));
  const __m512i odd_words = _mm512_set_epi64(
      octet_source_lane<B>(1, 7), octet_source_lane<B>(1, 6), octet_source_lane<B>(1, 5), octet_source_lane<B>(1, 4),
      octet_source_lane<B>(1, 3), octet_source_lane<B>(1, 2), octet_source_lane<B>(1, 1), octet_source_lane<B>(1, 0));
  constexpr __mmask32 even_mask = octet_source_mask<B>(0);
  constexpr __mmask32 odd_mask = octet_source_mask<B>(1);
  const __mmask64 step_bytes = (~__mmask64(0)) >> (64 - 8 * B);
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    OctetLanes w;
    std::memcpy(&w, codes + 8 * g, sizeof w);
    const __m512i lanes = reinterpret_cast<__m512i>(gather_octet<B>(w) << shifts);
    const __m512i even = _mm512_maskz_permutexvar_epi16(even_mask, even_words, lanes);
    const __m512i odd = _mm512_maskz_permutexvar_epi16(odd_mask, odd_words, lanes);
    _mm512_mask_storeu_epi8(out + B * g, step_bytes, _mm512_or_si512(even, odd));
  }
  return g;
}
#endif

template <int B>
ACTKIT_CPU_INLINE void pack_octets(const uint8_t* codes, int64_t groups, uint8_t* out) {
#if defined(__AVX512BW__)
  const int64_t done = pack_octets_by_eight<B>(codes, groups, out);
  codes += 8 * done;
  groups -= done;
  out += B * done;
#endif
  const int64_t whole = groups > 8 / B + 1 ? groups - (8 / B + 1) : 0;  // groups with 8 bytes of room
  alignas(64) uint64_t v[kOctetBlock];
  for (int64_t g0 = 0; g0 < groups; g0 += kOctetBlock) {
    const int64_t n = groups - g0 < kOctetBlock ? groups - g0 : kOctetBlock;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      uint64_t w;
      std::memcpy(&w, codes + 8 * (g0 + i), 8);
      v[i] = gather_octet<B>(w);
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = g0 + i;
      if (g < whole) {
        std::memcpy(out + B * g, &v[i], 8);  // the spare high bytes are zeros the next octet overwrites
      } else {
        std::memcpy(out + B * g, &v[i], B);
      }
    }
  }
}

#if defined(__AVX512BW__)
// Eight octets per step in one 512-bit vector, for unpack_octets: octet k
// starts at byte Bk, so a word permute brings words Bk/2 .. Bk/2 + 3 into
// 64-bit lane k, a shift by 8 (Bk mod 2) bits puts the octet at the lane's
// bottom with 56 or more of its bits there (8B <= 56), and the spread runs
// on all eight lanes. The load is masked to the 8B bytes of the step, so
// it reads nothing past the run. Returns the octets done: groups rounded
// down to a multiple of 8. (VBMI's byte permute would do it in one step,
// but Skylake-X and Cascade Lake have only the word one.)
template <int B>
ACTKIT_CPU_INLINE int64_t unpack_octets_by_eight(const uint8_t* in, int64_t groups, uint8_t* codes) {
  // Lane k's four word indices.
  constexpr auto words_of = [](int k) {
    const uint64_t w = uint64_t(B * k / 2);
    return (long long)(w | (w + 1) << 16 | (w + 2) << 32 | (w + 3) << 48);
  };
  const __m512i words = _mm512_set_epi64(words_of(7), words_of(6), words_of(5), words_of(4), words_of(3), words_of(2),
                                         words_of(1), words_of(0));
  // A vector shift rather than _mm512_srlv_epi64, whose undefined pass-through
  // operand GCC 12 reports as uninitialized.
  const OctetLanes shifts = octet_parity_shifts<B>();
  const __mmask64 step_bytes = (~__mmask64(0)) >> (64 - 8 * B);
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    const __m512i raw = _mm512_maskz_loadu_epi8(step_bytes, in + B * g);
    const OctetLanes lanes = reinterpret_cast<OctetLanes>(_mm512_permutexvar_epi16(words, raw)) >> shifts;
    const OctetLanes spread = spread_octet<B>(lanes);
    _mm512_storeu_si512(codes + 8 * g, reinterpret_cast<__m512i>(spread));
  }
  return g;
}
#endif

template <int B>
ACTKIT_CPU_INLINE void unpack_octets(const uint8_t* in, int64_t groups, uint8_t* codes) {
#if defined(__AVX512BW__)
  const int64_t done = unpack_octets_by_eight<B>(in, groups, codes);
  in += B * done;
  groups -= done;
  codes += 8 * done;
#endif
  const int64_t whole = groups > 8 / B + 1 ? groups - (8 / B + 1) : 0;
  alignas(64) uint64_t v[kOctetBlock];
  for (int64_t g0 = 0; g0 < groups; g0 += kOctetBlock) {
    const int64_t n = groups - g0 < kOctetBlock ? groups - g0 : kOctetBlock;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = g0 + i;
      if (g < whole) {
        std::memcpy(&v[i], in + B * g, 8);  // the spare high bytes are dropped by the spread
      } else {
        v[i] = 0;
        std::memcpy(&v[i], in + B * g, B);
      }
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t w = spread_octet<B>(v[i]);
      std::memcpy(codes + 8 * (g0 + i), &w, 8);
    }
  }
}

// Packs/unpacks the whole groups of eight of a byte-aligned run of 3, 5, 6
// or 7-bit codes; returns how many codes that covered (a multiple of 8).
ACTKIT_CPU_INLINE int64_t pack_octets(const uint8_t* codes, int64_t count, int bits, uint8_t* out) {
  const int64_t groups = count / 8;
  switch (bits) {
    case 3: pack_octets<3>(codes, groups, out); break;
    case 5: pack_octets<5>(codes, groups, out); break;
    case 6: pack_octets<6>(codes, groups, out); break;
    case 7: pack_octets<7>(codes, groups, out); break;
    default: return 0;
  }
  return 8 * groups;
}

ACTKIT_CPU_INLINE int64_t unpack_octets(const uint8_t* in, int64_t count, int bits, uint8_t* codes) {
  const int64_t groups = count / 8;
  switch (bits) {
    case 3: unpack_octets<3>(in, groups, codes); break;
    case 5: unpack_octets<5>(in, groups, codes); break;
    case 6: unpack_octets<6>(in, groups, codes); break;
    case 7: unpack_octets<7>(in, groups, codes); break;
    default: return 0;
  }
  return 8 * groups;
}

// Whether codes of `bits` bits (1..8) fill whole bytes: bits is a power of
// two. These tests and the counts below are masks and shifts, not divisions
// by the run-time width: these run once per group or tile, and on a Cascade
// Lake Xeon the three integer divisions they made (two 32-bit, one 64-bit:
// 40-90 cycles) were the hottest instructions of TAH-Quant's decode.
ACTKIT_CPU_INLINE bool fills_whole_bytes(int bits) { return (bits & (bits - 1)) == 0; }

// log2 of the codes per byte when fills_whole_bytes(bits): 3, 2, 1, 0.
ACTKIT_CPU_INLINE int codes_per_byte_log2(int bits) { return 3 - __builtin_ctz(unsigned(bits)); }

}  // namespace detail

// Packs codes[0, count) (each < 2^bits) at stream bit `bit_pos` of `out`.
// Bytes wholly inside the run are stored; the at most two bytes shared with
// neighbouring runs are OR-ed atomically. So `out` must start zeroed, and
// disjoint runs may be packed concurrently.
ACTKIT_CPU_INLINE void pack_codes(const uint8_t* codes, int64_t count, int bits, uint8_t* out, int64_t bit_pos) {
  if (count <= 0) return;
  if ((bit_pos & 7) == 0 && !detail::fills_whole_bytes(bits)) {
    // Whole groups of eight fill whole bytes that no other run touches.
    const int64_t done = detail::pack_octets(codes, count, bits, out + (bit_pos >> 3));
    codes += done;
    count -= done;
    bit_pos += done * bits;
    if (count == 0) return;
  }
  uint8_t* o = out + (bit_pos >> 3);
  if ((bit_pos & 7) == 0 && detail::fills_whole_bytes(bits)) {
    const int per_byte_log2 = detail::codes_per_byte_log2(bits);
    const int per_byte = 1 << per_byte_log2;
    const int64_t full = count >> per_byte_log2;
    switch (bits) {
      case 1: detail::pack1(codes, full, o); break;
      case 2: detail::pack2(codes, full, o); break;
      case 4: detail::pack4(codes, full, o); break;
      default: std::memcpy(o, codes, size_t(full)); break;
    }
    const int64_t rest = count - full * per_byte;
    if (rest > 0) {
      uint32_t v = 0;
      for (int64_t k = 0; k < rest; ++k) v |= uint32_t(codes[full * per_byte + k]) << (k * bits);
      atomic_or_byte(o + full, uint8_t(v));
    }
    return;
  }
  // Generic path: accumulate codes and flush whole bytes.
  const int lead = int(bit_pos & 7);
  uint64_t acc = 0;
  int nacc = lead;  // the run's first byte starts `lead` bits in
  bool shared_first = lead != 0;
  for (int64_t k = 0; k < count; ++k) {
    acc |= uint64_t(codes[k]) << nacc;
    nacc += bits;
    while (nacc >= 8) {
      if (shared_first) {
        atomic_or_byte(o, uint8_t(acc));
        shared_first = false;
      } else {
        *o = uint8_t(acc);
      }
      ++o;
      acc >>= 8;
      nacc -= 8;
    }
  }
  if (nacc > 0) atomic_or_byte(o, uint8_t(acc));
}

// Unpacks `count` codes of `bits` bits from stream bit `bit_pos` of `in`.
// Reads only the bytes that hold the run's bits.
ACTKIT_CPU_INLINE void unpack_codes(const uint8_t* in, int64_t bit_pos, int64_t count, int bits, uint8_t* codes) {
  if (count <= 0) return;
  if ((bit_pos & 7) == 0 && !detail::fills_whole_bytes(bits)) {
    const int64_t done = detail::unpack_octets(in + (bit_pos >> 3), count, bits, codes);
    codes += done;
    count -= done;
    bit_pos += done * bits;
    if (count == 0) return;
  }
  const uint8_t* p = in + (bit_pos >> 3);
  if ((bit_pos & 7) == 0 && detail::fills_whole_bytes(bits)) {
    const int per_byte_log2 = detail::codes_per_byte_log2(bits);
    const int per_byte = 1 << per_byte_log2;
    const int64_t full = count >> per_byte_log2;
    switch (bits) {
      case 1: detail::unpack1(p, full, codes); break;
      case 2: detail::unpack2(p, full, codes); break;
      case 4: detail::unpack4(p, full, codes); break;
      default: std::memcpy(codes, p, size_t(full)); break;
    }
    const int64_t rest = count - full * per_byte;
    const uint32_t mask = (1u << bits) - 1u;
    for (int64_t k = 0; k < rest; ++k) codes[full * per_byte + k] = uint8_t((p[full] >> (k * bits)) & mask);
    return;
  }
  const uint32_t mask = (1u << bits) - 1u;
  int shift = int(bit_pos & 7);
  for (int64_t k = 0; k < count; ++k) {
    uint32_t v = uint32_t(p[0]) >> shift;
    if (shift + bits > 8) v |= uint32_t(p[1]) << (8 - shift);
    codes[k] = uint8_t(v & mask);
    shift += bits;
    p += shift >> 3;
    shift &= 7;
  }
}

}  // namespace actkit::kernels::cpu
