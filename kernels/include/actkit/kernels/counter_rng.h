// Counter-based random numbers: u = f(seed, element index).
//
// Like Philox, the generator is stateless: element i's draw depends on the
// seed and i only, so CPU threads, CUDA blocks and any work split produce the
// same numbers. Instead of Philox's ten multiply rounds per four outputs it
// uses two rounds of the murmur3 32-bit finalizer keyed by the seed (each
// round is a bijection with full avalanche). That is cheap enough to vectorize
// at memory bandwidth and is plenty for stochastic rounding; tests/
// check uniformity and independence across seeds.
#pragma once

#include "actkit/kernels/common.h"

namespace actkit::kernels {

struct RngKey {
  uint32_t k0 = 0;
  uint32_t k1 = 0;
};

// Spreads a user seed over the two 32-bit round keys (splitmix64 step).
ACTKIT_HD RngKey make_rng_key(uint64_t seed) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return RngKey{uint32_t(z), uint32_t(z >> 32)};
}

ACTKIT_HD uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// The part of the second round's input that depends on the high word only:
// loops over a run of elements compute it once (the high word changes at
// most once in a run) instead of one multiply per element.
ACTKIT_HD uint32_t counter_high_mix(RngKey key, uint32_t hi) { return key.k1 ^ (hi * 0x9e3779b9u); }

// How many of the `len` (>= 0) elements start, start + 1, ... share start's
// high word: all of them, or those before the low word wraps. A CPU loop
// over a run keeps its counters in 32-bit lanes under one high word, so a
// run is cut there; a run of at most 2^32 elements is cut at most once.
ACTKIT_HD int64_t counters_before_wrap(uint64_t start, int64_t len) {
  const uint64_t to_wrap = (uint64_t(1) << 32) - uint32_t(start);
  return uint64_t(len) < to_wrap ? len : int64_t(to_wrap);
}

// 32 random bits for element (hi:lo), given counter_high_mix(key, hi).
ACTKIT_HD uint32_t counter_hash_mixed(uint32_t k0, uint32_t lo, uint32_t high_mix) {
  return fmix32(fmix32(lo ^ k0) ^ high_mix);
}

// 32 random bits for element (hi:lo) of the stream selected by `key`.
ACTKIT_HD uint32_t counter_hash(RngKey key, uint32_t lo, uint32_t hi) {
  return counter_hash_mixed(key.k0, lo, counter_high_mix(key, hi));
}

// 32 random bits as a uniform float in [0, 1) with 24 random bits (every
// value exactly representable, so host and device agree).
ACTKIT_HD float counter_bits_to_uniform(uint32_t bits) { return float(bits >> 8) * 5.9604644775390625e-8f; }

ACTKIT_HD float counter_uniform(RngKey key, uint32_t lo, uint32_t hi) {
  return counter_bits_to_uniform(counter_hash(key, lo, hi));
}

ACTKIT_HD float counter_uniform(RngKey key, uint64_t index) {
  return counter_uniform(key, uint32_t(index), uint32_t(index >> 32));
}

}  // namespace actkit::kernels
