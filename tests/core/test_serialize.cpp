// Serialized payloads arrive from other processes and disks: every
// truncation, extension and corruption must give a FormatError, never an
// out-of-bounds read (this file also runs under ASan/UBSan in CI).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "actkit/core/codecs/bitfield_codecs.h"
#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/core/codecs/raw_codec.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;

namespace {

std::vector<CompressedTensor> samples() {
  PerGroupOptions uniform;
  uniform.bits = 3;
  uniform.seed = 4;
  DirectQOptions directq;
  directq.bits = 3;
  directq.per_channel = true;
  TahOptions tah;
  tah.group_size = 16;
  tah.high_fraction = 0.5;
  at::Tensor act = at::randn({3, 32});
  act[1][5] = 40;  // an outlier tile
  PerGroupOptions mixed;
  mixed.bits = 0;
  mixed.sample_bits = {1, 2, 8};
  mixed.meta_format = MetaFormat::kFloat16;
  return {
      encode_per_group(at::randn({4, 70}), uniform),
      encode_per_group(at::randn({3, 5, 11}).to(at::kHalf), mixed),
      encode_per_group(at::empty({0, 4}), uniform),
      encode_mask(at::rand({13}) > 0.5),
      encode_index(at::randint(0, 9, {5, 6}, at::kLong), 4),
      encode_directq(at::randn({2, 9}), directq),
      encode_tah(act, tah),
      encode_raw(at::randn({3, 7})),
      encode_raw(at::randn({2, 5}), at::kHalf),
  };
}

// Owns an exactly-sized heap copy so ASan flags any read past its end.
CompressedTensor parse(const std::vector<uint8_t>& bytes, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(copy.get(), bytes.data(), std::min(size, bytes.size()));
  return CompressedTensor::deserialize(copy.get(), size);
}

}  // namespace

TEST(Checksum, KnownValueAndPathsAgree) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xe3069283u);
  std::vector<uint8_t> buf(1000);
  std::mt19937 rng(1);
  for (auto& b : buf) b = uint8_t(rng());
  for (size_t n : {0, 1, 7, 8, 9, 63, 1000}) {
    EXPECT_EQ(crc32c(buf.data(), n), actkit::detail::crc32c_table(buf.data(), n)) << n;
  }
  EXPECT_EQ(crc32c(buf.data() + 10, 90, crc32c(buf.data(), 10)), crc32c(buf.data(), 100));
}

// zip's CRC-32 (what torch.save's archives record): the standard check
// value, the 8-bytes-a-step path against a bit-by-bit reference, and
// continuation.
TEST(Checksum, ZipCrc32KnownValueAndReference) {
  EXPECT_EQ(crc32_zip("123456789", 9), 0xcbf43926u);
  auto bitwise = [](const uint8_t* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0xedb88320u : 0u);
    }
    return ~c;
  };
  std::vector<uint8_t> buf(1000);
  std::mt19937 rng(2);
  for (auto& b : buf) b = uint8_t(rng());
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 1000}) EXPECT_EQ(crc32_zip(buf.data(), n), bitwise(buf.data(), n)) << n;
  EXPECT_EQ(crc32_zip(buf.data() + 13, 87, crc32_zip(buf.data(), 13)), crc32_zip(buf.data(), 100));
}

// Every payload ends with the CRC-32C of what precedes it, so CRC-32C over
// two different payloads of one length is the same constant: content_checksum
// tells them apart, and still sees a change anywhere, the tail included.
TEST(Checksum, ContentChecksumTellsPayloadsApartWhereCrc32cCannot) {
  const std::vector<uint8_t> a = samples()[0].serialize();
  std::vector<uint8_t> b = a;
  b[b.size() / 2] ^= 0x01;
  const uint32_t tail = crc32c(b.data(), b.size() - 4);
  std::memcpy(b.data() + b.size() - 4, &tail, 4);  // resealed: a well-formed, different payload
  EXPECT_EQ(crc32c(a.data(), a.size()), crc32c(b.data(), b.size()));
  EXPECT_NE(content_checksum(a.data(), a.size()), content_checksum(b.data(), b.size()));
  std::vector<uint8_t> c = a;
  c.back() ^= 0x80;
  EXPECT_NE(content_checksum(a.data(), a.size()), content_checksum(c.data(), c.size()));
  EXPECT_EQ(content_checksum(a.data(), 3), crc32c(a.data(), 3));
}

TEST(Serialize, RoundTripKeepsEverything) {
  for (const CompressedTensor& ct : samples()) {
    const std::vector<uint8_t> bytes = ct.serialize();
    EXPECT_EQ(bytes.size(), ct.serialized_size());
    const CompressedTensor back = CompressedTensor::deserialize(bytes);
    EXPECT_EQ(back.kind(), ct.kind());
    EXPECT_EQ(back.shape(), ct.shape());
    EXPECT_EQ(back.dtype(), ct.dtype());
    EXPECT_EQ(back.bits(), ct.bits());
    EXPECT_EQ(back.sample_bits(), ct.sample_bits());
    EXPECT_EQ(back.byte_size(), ct.byte_size());
    EXPECT_TRUE(bitwise_equal(back.decode(), ct.decode()));
    EXPECT_EQ(back.serialize(), bytes);
  }
}

TEST(Serialize, SerializeIntoChecksCapacity) {
  const CompressedTensor ct = samples()[0];
  std::vector<uint8_t> buf(ct.serialized_size() - 1);
  EXPECT_THROW(ct.serialize_into(buf.data(), buf.size()), InvalidInput);
  buf.resize(ct.serialized_size() + 10);
  EXPECT_EQ(ct.serialize_into(buf.data(), buf.size()), ct.serialized_size());
}

TEST(Serialize, EveryTruncationIsAFormatError) {
  for (const CompressedTensor& ct : samples()) {
    const std::vector<uint8_t> bytes = ct.serialize();
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_THROW(parse(bytes, n), FormatError) << "kept " << n << " of " << bytes.size();
    }
  }
  EXPECT_THROW(CompressedTensor::deserialize(nullptr, 0), FormatError);
}

TEST(Serialize, TrailingBytesAreAFormatError) {
  for (const CompressedTensor& ct : samples()) {
    std::vector<uint8_t> bytes = ct.serialize();
    bytes.push_back(0);
    EXPECT_THROW(parse(bytes, bytes.size()), FormatError);
  }
}

TEST(Serialize, EverySingleByteCorruptionIsAFormatError) {
  for (const CompressedTensor& ct : samples()) {
    const std::vector<uint8_t> bytes = ct.serialize();
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (uint8_t flip : {0x01, 0x80, 0xff}) {
        std::vector<uint8_t> bad = bytes;
        bad[i] ^= flip;
        EXPECT_THROW(parse(bad, bad.size()), FormatError) << "byte " << i;
      }
    }
  }
}

TEST(Serialize, HostileHeadersNeverReadOutOfBounds) {
  // Forge headers with huge dimensions, ranks and sizes; checksums are
  // recomputed so that parsing goes past the checksum test where possible.
  const std::vector<uint8_t> good = samples()[1].serialize();
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bad = good;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) bad[rng() % 40] = uint8_t(rng());
    if (rng() % 2) bad.resize(rng() % (bad.size() + 1));
    if (bad.size() >= 4) {
      const uint32_t crc = crc32c(bad.data(), bad.size() - 4);
      std::memcpy(bad.data() + bad.size() - 4, &crc, 4);
    }
    try {
      const CompressedTensor ct = parse(bad, bad.size());
      ct.decode();  // a forged header that passes must still decode in bounds
    } catch (const FormatError&) {
    }
  }
}

TEST(Serialize, UnsupportedVersionIsNamed) {
  std::vector<uint8_t> bytes = samples()[0].serialize();
  bytes[4] = 2;
  try {
    parse(bytes, bytes.size());
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("version"), std::string::npos);
  }
}
