// The 1-bit mask codec and the small-integer index codec.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "actkit/core/codecs/bitfield_codecs.h"
#include "actkit/core/errors.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;

TEST(Mask, RoundTripsAnyShape) {
  for (auto shape : {std::vector<int64_t>{0}, {1}, {7}, {8}, {9}, {3, 5, 17}, {64, 1000}}) {
    const at::Tensor m = at::rand(shape) > 0.5;
    const CompressedTensor ct = encode_mask(m);
    EXPECT_EQ(ct.byte_size(), (m.numel() + 7) / 8);
    EXPECT_TRUE(bitwise_equal(ct.decode(), m));
  }
}

TEST(Mask, NonContiguousMask) {
  const at::Tensor m = (at::rand({40, 30}) > 0.3).t();
  EXPECT_TRUE(bitwise_equal(encode_mask(m).decode(), m.contiguous()));
}

TEST(Mask, PositiveMaskOfFloats) {
  at::Tensor x = at::randn({33, 65});
  x[0][0] = 0.0f;
  x[0][1] = -0.0f;
  x[0][2] = NAN;
  x[0][3] = INFINITY;
  x[0][4] = -INFINITY;
  x[0][5] = 1e-40f;  // subnormal, positive
  for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const at::Tensor xd = x.to(dt);
    EXPECT_TRUE(bitwise_equal(encode_positive_mask(xd).decode(), xd > 0)) << dt;
  }
}

TEST(Mask, WrongDtypesAreRejected) {
  EXPECT_THROW(encode_mask(at::ones({3})), InvalidInput);
  EXPECT_THROW(encode_positive_mask(at::ones({3}, at::kLong)), InvalidInput);
}

TEST(Index, RoundTripsEveryWidthAndDtype) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (auto dt : {at::kByte, at::kInt, at::kLong}) {
      const at::Tensor idx = at::randint(0, 1 << bits, {17, 9, 5}, at::TensorOptions().dtype(dt));
      const CompressedTensor ct = encode_index(idx, bits);
      EXPECT_EQ(ct.byte_size(), (idx.numel() * bits + 7) / 8);
      EXPECT_TRUE(bitwise_equal(ct.decode(), idx)) << bits << " " << dt;
    }
  }
}

TEST(Index, OutOfRangeValuesAreRejected) {
  EXPECT_THROW(encode_index(at::tensor({0, 1, 4}, at::kLong), 2), InvalidInput);
  EXPECT_THROW(encode_index(at::tensor({0, -1}, at::kLong), 2), InvalidInput);
  EXPECT_THROW(encode_index(at::tensor({0, -1}, at::kInt), 8), InvalidInput);
  EXPECT_THROW(encode_index(at::tensor({0, 1}, at::kLong), 0), InvalidInput);
  EXPECT_THROW(encode_index(at::tensor({0, 1}, at::kLong), 9), InvalidInput);
  EXPECT_THROW(encode_index(at::tensor({0.0f, 1.0f}), 2), InvalidInput);
  EXPECT_THROW(encode_index(at::ones({2}, at::kBool), 1), InvalidInput);
  EXPECT_NO_THROW(encode_index(at::tensor({0, 255}, at::kInt), 8));
}

TEST(Mask, DecodeSamplesEqualsASliceOfTheFullDecode) {
  // 8 values a sample start on a byte; 5 mostly do not.
  for (int64_t d : {8, 5}) {
    const at::Tensor m = at::rand({6, d}) > 0.5;
    const CompressedTensor ct = encode_mask(m);
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 6}, {1, 2}, {3, 6}}) {
      EXPECT_TRUE(bitwise_equal(ct.decode_samples(b, e), m.narrow(0, b, e - b))) << d << " [" << b << ", " << e << ")";
    }
  }
}

TEST(Index, DecodeSamplesEqualsASliceOfTheFullDecode) {
  const at::Tensor idx = at::randint(0, 8, {5, 4, 3}, at::kByte);
  const CompressedTensor ct = encode_index(idx, 3);
  EXPECT_TRUE(bitwise_equal(ct.decode_samples(2, 4), idx.narrow(0, 2, 2)));
  EXPECT_TRUE(bitwise_equal(ct.decode_samples(1, 2), idx.narrow(0, 1, 1)));
}
