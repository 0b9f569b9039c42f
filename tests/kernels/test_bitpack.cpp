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

// Runs that start on a byte take the whole-byte paths (eight codes at a time
// for the widths that straddle bytes); a neighbour packed concurrently on
// either side must keep its bits.
TEST(BitPack, ByteAlignedRunsOfEveryWidth) {
  std::mt19937 rng(12);
  for (int bits = 1; bits <= 8; ++bits) {
    // 512 codes fill one block of 64 octets (bitpack.h): lengths around it
    // cross the block boundary with every kind of tail.
    for (int64_t len : {0, 1, 7, 8, 9, 15, 16, 64, 100, 257, 511, 512, 513, 520, 537, 1029}) {
      const int64_t start = 8 * int64_t(rng() % 4);
      std::vector<uint8_t> codes(static_cast<size_t>(len));
      for (auto& c : codes) c = uint8_t(rng() & ((1u << bits) - 1));
      std::vector<uint8_t> stream(size_t((start + len * bits + 7) / 8 + 2), 0);
      pack_codes(codes.data(), len, bits, stream.data(), start);
      for (int64_t i = 0; i < len; ++i) {
        ASSERT_EQ(read_bits(stream, start + i * bits, bits), codes[size_t(i)]) << bits << " " << len << " " << i;
      }
      for (int64_t b = 0; b < start / 8; ++b) ASSERT_EQ(stream[size_t(b)], 0);
      ASSERT_EQ(stream.back(), 0);
      std::vector<uint8_t> back(size_t(len), 0xff);
      unpack_codes(stream.data(), start, len, bits, back.data());
      ASSERT_EQ(back, codes) << bits << " " << len;
    }
  }
}
