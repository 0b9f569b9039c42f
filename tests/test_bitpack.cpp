// The CPU bit-stream packer: every width, aligned and unaligned runs, and
// neighbouring runs packed independently into one stream.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "bitpack.h"

using actkit::kernels::cpu::pack_codes;
using actkit::kernels::cpu::unpack_codes;

namespace {

// Reference: bit t of code k sits at stream bit pos + k*bits + t.
uint32_t read_bits(const std::vector<uint8_t>& s, int64_t pos, int bits) {
  uint32_t v = 0;
  for (int t = 0; t < bits; ++t) v |= uint32_t((s[size_t((pos + t) >> 3)] >> ((pos + t) & 7)) & 1) << t;
  return v;
}

}  // namespace

TEST(BitPack, RunsAtAnyOffsetRoundTripAndMatchTheReference) {
  std::mt19937 rng(11);
  for (int bits = 1; bits <= 8; ++bits) {
    for (int trial = 0; trial < 40; ++trial) {
      // Several consecutive runs of random lengths, starting at a random bit.
      const int64_t start = rng() % 29;
      std::vector<int64_t> lens;
      int64_t total = 0;
      for (int r = 0; r < 5; ++r) {
        lens.push_back(rng() % 70);
        total += lens.back();
      }
      std::vector<uint8_t> codes(static_cast<size_t>(total));
      for (auto& c : codes) c = uint8_t(rng() & ((1u << bits) - 1));
      std::vector<uint8_t> stream(size_t((start + total * bits + 7) / 8 + 1), 0);
      int64_t k = 0;
      for (int64_t len : lens) {
        pack_codes(codes.data() + k, len, bits, stream.data(), start + k * bits);
        k += len;
      }
      for (int64_t i = 0; i < total; ++i) {
        ASSERT_EQ(read_bits(stream, start + i * bits, bits), codes[size_t(i)]) << "bits " << bits << " code " << i;
      }
      std::vector<uint8_t> back(size_t(total), 0xff);
      unpack_codes(stream.data(), start, total, bits, back.data());
      ASSERT_EQ(back, codes) << "bits " << bits;
      // Nothing written past the last code's byte.
      ASSERT_EQ(stream.back(), 0);
    }
  }
}
