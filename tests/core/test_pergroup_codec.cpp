// Per-group stochastic quantization: the statistical properties of ActNN
// Sec. 4.1 and every input shape, dtype and policy the API accepts.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>

#include "actkit/core/errors.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;
using actkit::test::payload_bytes;

namespace {

PerGroupOptions opts(int bits, uint64_t seed = 0) {
  PerGroupOptions o;
  o.bits = bits;
  o.seed = seed;
  return o;
}

at::Tensor roundtrip(const at::Tensor& x, const PerGroupOptions& o) { return encode_per_group(x, o).decode(); }

// Per-value step R/B of each group, read back from the payload metadata.
at::Tensor group_ranges(const CompressedTensor& ct) {
  const int64_t groups = ct.meta().num_groups();
  at::Tensor meta = ct.payload().narrow(0, 0, 4 * groups).view(at::kShort).view({groups, 2});
  at::Tensor range_bits = meta.select(1, 1).contiguous();
  // bf16 -> float: shift into the high half of a 32-bit word.
  return (range_bits.to(at::kInt).bitwise_and(0xffff) * 65536).view(at::kFloat);
}

}  // namespace

TEST(PerGroup, ByteSizeIsExact) {
  const at::Tensor x = at::randn({6, 1000});
  for (int bits = 1; bits <= 8; ++bits) {
    const CompressedTensor ct = encode_per_group(x, opts(bits));
    const int64_t groups = 6 * 4;  // ceil(1000 / 256) per sample
    EXPECT_EQ(ct.byte_size(), 4 * groups + (6 * 1000 * bits + 7) / 8) << bits;
    EXPECT_EQ(ct.bits(), bits);
    EXPECT_EQ(ct.average_bits(), bits);
  }
}

TEST(PerGroup, UnbiasedOverManySeeds) {
  const at::Tensor x = at::randn({4, 700}) * 3 + 1;
  constexpr int kSeeds = 3000;
  for (int bits : {1, 2, 4}) {
    at::Tensor sum = at::zeros_like(x, at::kDouble);
    for (int s = 0; s < kSeeds; ++s) sum += roundtrip(x, opts(bits, uint64_t(s) * 7919 + 1)).to(at::kDouble);
    const at::Tensor err = sum / kSeeds - x.to(at::kDouble);
    // Per value the rounding variance is at most step^2/4 with step <= range/B.
    const double range = (x.max() - x.min()).item<double>();
    const double step = range / ((1 << bits) - 1);
    const double se = std::sqrt(step * step / 4 / kSeeds);
    EXPECT_LT(err.abs().max().item<double>(), 6 * se) << bits;
    // The mean error over all values (the bias) is far smaller.
    EXPECT_LT(std::abs(err.mean().item<double>()), 4 * se / std::sqrt(double(x.numel()))) << bits;
  }
}

TEST(PerGroup, VarianceMatchesTheoryOnUniformData) {
  const at::Tensor x = at::rand({64, 1 << 14});
  for (int bits : {1, 2, 4, 8}) {
    const CompressedTensor ct = encode_per_group(x, opts(bits, 5));
    const double sq_err = (ct.decode() - x).to(at::kDouble).pow(2).mean().item<double>();
    const double B = (1 << bits) - 1;
    const double theory = (group_ranges(ct).to(at::kDouble).pow(2) / (6 * B * B)).mean().item<double>();
    EXPECT_NEAR(sq_err / theory, 1.0, 0.05) << bits << " bits";
  }
}

TEST(PerGroup, ValuesOnTheGridRoundTripExactly) {
  for (int bits : {1, 2, 3, 4, 7, 8}) {
    const int B = (1 << bits) - 1;
    const double step = 1.0 / 64;  // R = B/64 and Z = -1 are exact in bf16 and fp16
    at::Tensor codes = at::randint(0, B + 1, {8, 512}, at::kLong);
    codes.select(1, 0).fill_(0);  // every group holds both ends of the grid
    codes.select(1, 1).fill_(B);
    codes.select(1, 256).fill_(0);
    codes.select(1, 257).fill_(B);
    const at::Tensor x = (codes.to(at::kDouble) * step - 1).to(at::kFloat);
    for (auto fmt : {MetaFormat::kBFloat16, MetaFormat::kFloat16}) {
      PerGroupOptions o = opts(bits, 17);
      o.meta_format = fmt;
      EXPECT_TRUE(bitwise_equal(roundtrip(x, o), x)) << bits << " bits";
    }
  }
}

// A constant group has range 0 before the metadata is rounded: its values
// decode exactly when the metadata format (bf16 by default) holds the
// constant, and otherwise within one bf16 step of it (the group interval
// [Z, Z + R] is rounded outward, so it still contains the value).
TEST(PerGroup, ConstantGroupsDecodeExactlyOrWithinOneMetadataStep) {
  for (float v : {0.0f, 1.5f, -3.0f, 1024.0f}) {
    const at::Tensor x = at::full({3, 300}, v);
    EXPECT_TRUE(bitwise_equal(roundtrip(x, opts(2)), x)) << v;
  }
  for (float v : {0.1f, -0.3f, 1.0f / 3.0f, 1e-3f, 12345.678f}) {
    const at::Tensor x = at::full({3, 300}, v);
    const at::Tensor y = roundtrip(x, opts(2));
    // bf16 keeps 8 significant bits: one step is 2^(exponent - 7).
    const double step = std::ldexp(1.0, std::ilogb(v) - 7);
    EXPECT_LE((y - x).abs().max().item<double>(), step) << v;
  }
}

TEST(PerGroup, DecodeStaysInsideTheGroupInterval) {
  const at::Tensor x = at::randn({5, 1000}) * 100;
  const at::Tensor y = roundtrip(x, opts(3, 99));
  // Stochastic rounding picks one of the two levels around each value, so
  // the error is below one step R/B (R rounded up by the bf16 metadata).
  const double range = (x.max() - x.min()).item<double>();
  EXPECT_LE((y - x).abs().max().item<double>(), range / 7 * 1.01);
}

TEST(PerGroup, EmptyTensors) {
  for (auto shape : {std::vector<int64_t>{0}, {0, 5}, {4, 0}, {0, 3, 2}}) {
    const at::Tensor x = at::empty(shape);
    const CompressedTensor ct = encode_per_group(x, opts(2));
    EXPECT_EQ(ct.byte_size(), 0);
    const at::Tensor y = ct.decode();
    EXPECT_EQ(y.sizes(), x.sizes());
  }
}

TEST(PerGroup, RankOneIsOneSample) {
  const at::Tensor x = at::randn({1000});
  const CompressedTensor ct = encode_per_group(x, opts(2));
  EXPECT_EQ(ct.meta().num_samples(), 1);
  EXPECT_EQ(ct.meta().num_groups(), 4);
  EXPECT_EQ(ct.decode().sizes(), x.sizes());
}

TEST(PerGroup, HigherRankKeepsShapeAndSamples) {
  const at::Tensor x = at::randn({3, 4, 5, 7});
  const CompressedTensor ct = encode_per_group(x, opts(4));
  EXPECT_EQ(ct.meta().num_samples(), 3);
  EXPECT_EQ(ct.meta().sample_size(), 140);
  EXPECT_EQ(ct.decode().sizes(), x.sizes());
  EXPECT_LT((ct.decode() - x).abs().max().item<float>(), (x.max() - x.min()).item<float>() / 15 * 1.01);
}

// Strided inputs are encoded by value: a transposed or sliced view gives the
// payload of its contiguous copy (encode makes that copy first; see
// encode_per_group), not of the memory under the view.
TEST(PerGroup, StridedViewsAreEncodedByValue) {
  const at::Tensor base = at::randn({300, 64});
  for (const at::Tensor& x : {base.t(), base.slice(0, 0, 300, 3), base.permute({1, 0}).slice(1, 1, 200, 2)}) {
    ASSERT_FALSE(x.is_contiguous());
    EXPECT_EQ(payload_bytes(encode_per_group(x, opts(2, 3))), payload_bytes(encode_per_group(x.contiguous(), opts(2, 3))));
  }
}

TEST(PerGroup, HalfAndBFloat16Inputs) {
  const at::Tensor x32 = at::randn({7, 513});
  for (auto dt : {at::kHalf, at::kBFloat16}) {
    const at::Tensor x = x32.to(dt);
    const CompressedTensor ct = encode_per_group(x, opts(4, 8));
    // Same values as float input: same codes and metadata.
    EXPECT_EQ(payload_bytes(ct), payload_bytes(encode_per_group(x.to(at::kFloat), opts(4, 8))));
    const at::Tensor y = ct.decode();
    EXPECT_EQ(y.scalar_type(), dt);
    EXPECT_TRUE(bitwise_equal(y, encode_per_group(x.to(at::kFloat), opts(4, 8)).decode().to(dt)));
  }
}

TEST(PerGroup, FloatInputMatchesAcrossMetadataFormatsInShape) {
  const at::Tensor x = at::randn({4, 300});
  PerGroupOptions o = opts(2);
  o.meta_format = MetaFormat::kFloat16;
  const CompressedTensor ct = encode_per_group(x, o);
  EXPECT_EQ(ct.meta().meta_format, MetaFormat::kFloat16);
  EXPECT_LT((ct.decode() - x).abs().max().item<float>(), (x.max() - x.min()).item<float>() / 3 * 1.01);
}

TEST(PerGroup, PerSampleBitsPackEachSampleAtItsOwnWidth) {
  // D = 301 makes most samples start mid-byte.
  const at::Tensor x = at::randn({6, 301});
  PerGroupOptions mixed = opts(0, 21);
  mixed.sample_bits = {1, 3, 8, 2, 5, 7};
  const CompressedTensor ct = encode_per_group(x, mixed);
  EXPECT_EQ(ct.bits(), 0);
  EXPECT_NEAR(ct.average_bits(), 26.0 / 6, 1e-12);
  EXPECT_EQ(ct.byte_size(), 6 * 2 * 4 + (301 * 26 + 7) / 8);
  const at::Tensor y = ct.decode();
  for (int64_t n = 0; n < 6; ++n) {
    // Element indices are global, so sample n equals sample n of a uniform
    // encode at that sample's width with the same seed.
    const at::Tensor uniform = roundtrip(x, opts(mixed.sample_bits[size_t(n)], 21));
    EXPECT_TRUE(bitwise_equal(y[n], uniform[n])) << "sample " << n;
  }
}

TEST(PerGroup, DeterministicForASeedAndThreadCount) {
  const at::Tensor x = at::randn({16, 5000});
  const auto a = payload_bytes(encode_per_group(x, opts(2, 1234)));
  EXPECT_EQ(a, payload_bytes(encode_per_group(x, opts(2, 1234))));
  EXPECT_NE(a, payload_bytes(encode_per_group(x, opts(2, 1235))));
  tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  EXPECT_EQ(a, payload_bytes(encode_per_group(x, opts(2, 1234))));
}

TEST(PerGroup, NonFiniteInputIsAnErrorByDefault) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    at::Tensor x = at::randn({4, 600});
    x[2][400] = bad;
    EXPECT_THROW(encode_per_group(x, opts(2)), InvalidInput) << bad;
  }
}

TEST(PerGroup, NonFiniteGroupsDecodeToNaNWhenPropagating) {
  at::Tensor x = at::randn({4, 600});
  x[2][400] = INFINITY;
  PerGroupOptions o = opts(2);
  o.non_finite = NonFinitePolicy::kPropagate;
  const at::Tensor y = encode_per_group(x, o).decode();
  // Sample 2, group 1 covers values 256..511.
  EXPECT_TRUE(y[2].slice(0, 256, 512).isnan().all().item<bool>());
  EXPECT_EQ(y.isnan().sum().item<int64_t>(), 256);
}

TEST(PerGroup, Fp16MetadataOverflowIsReported) {
  const at::Tensor x = at::randn({2, 256}) * 1e5;
  PerGroupOptions o = opts(2);
  o.meta_format = MetaFormat::kFloat16;
  EXPECT_THROW(encode_per_group(x, o), InvalidInput);
  o.meta_format = MetaFormat::kBFloat16;
  EXPECT_NO_THROW(encode_per_group(x, o));
}

TEST(PerGroup, GroupSizes) {
  const at::Tensor x = at::randn({3, 1000});
  for (int g : {8, 32, 64, 1024, 4096}) {
    PerGroupOptions o = opts(2);
    o.group_size = g;
    const CompressedTensor ct = encode_per_group(x, o);
    EXPECT_EQ(ct.meta().num_groups(), 3 * ((1000 + g - 1) / g)) << g;
    EXPECT_EQ(ct.decode().sizes(), x.sizes());
  }
}

TEST(PerGroup, BadArgumentsAreClearErrors) {
  const at::Tensor x = at::randn({4, 10});
  EXPECT_THROW(encode_per_group(x, opts(0)), InvalidInput);
  EXPECT_THROW(encode_per_group(x, opts(9)), InvalidInput);
  EXPECT_THROW(encode_per_group(at::ones({4, 10}, at::kInt), opts(2)), InvalidInput);
  EXPECT_THROW(encode_per_group(at::ones({4, 10}, at::kDouble), opts(2)), InvalidInput);
  EXPECT_THROW(encode_per_group(at::scalar_tensor(1.0), opts(2)), InvalidInput);
  EXPECT_THROW(encode_per_group(at::Tensor(), opts(2)), InvalidInput);
  PerGroupOptions o = opts(2);
  o.group_size = 100;
  EXPECT_THROW(encode_per_group(x, o), InvalidInput);
  o = opts(2);
  o.sample_bits = {2, 2};  // 4 samples
  EXPECT_THROW(encode_per_group(x, o), InvalidInput);
  o.sample_bits = {2, 2, 9, 2};
  EXPECT_THROW(encode_per_group(x, o), InvalidInput);
  try {
    encode_per_group(x, opts(9));
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("bits"), std::string::npos);
  }
}

TEST(PerGroup, EmptyCompressedTensorRefusesToDecode) {
  EXPECT_THROW(CompressedTensor().decode(), InvalidInput);
}

TEST(PerGroup, DecodeIntoReusesABufferAndChecksIt) {
  const at::Tensor x = at::randn({4, 300});
  const CompressedTensor ct = encode_per_group(x, opts(2, 6));
  at::Tensor out = at::empty({4, 300});
  ct.decode_into(out);
  EXPECT_TRUE(bitwise_equal(out, ct.decode()));
  at::Tensor wrong_shape = at::empty({4, 301});
  at::Tensor wrong_dtype = at::empty({4, 300}, at::kHalf);
  at::Tensor strided = at::empty({300, 4}).t();
  EXPECT_THROW(ct.decode_into(wrong_shape), InvalidInput);
  EXPECT_THROW(ct.decode_into(wrong_dtype), InvalidInput);
  EXPECT_THROW(ct.decode_into(strided), InvalidInput);
}

// Backward decodes saved activations a few samples at a time.
TEST(PerGroup, DecodeSamplesEqualsASliceOfTheFullDecode) {
  // D = 301 at 3 bits: most samples start mid-byte in the code stream.
  const at::Tensor x = at::randn({7, 301});
  PerGroupOptions mixed = opts(0, 5);
  mixed.sample_bits = {1, 3, 8, 2, 5, 7, 4};
  for (const PerGroupOptions& o : {opts(2, 5), opts(3, 5), mixed}) {
    const CompressedTensor ct = encode_per_group(x, o);
    const at::Tensor all = ct.decode();
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 7}, {0, 1}, {1, 2}, {2, 5}, {3, 7}, {6, 7}}) {
      EXPECT_TRUE(bitwise_equal(ct.decode_samples(b, e), all.narrow(0, b, e - b)))
          << "bits " << o.bits << " [" << b << ", " << e << ")";
    }
  }
  const CompressedTensor image = encode_per_group(at::randn({5, 3, 9, 7}), opts(2, 5));
  EXPECT_EQ(image.decode_samples(1, 3).sizes(), at::IntArrayRef({2, 3, 9, 7}));
}

TEST(PerGroup, DecodeSamplesRejectsBadRanges) {
  const CompressedTensor ct = encode_per_group(at::randn({4, 40}), opts(2));
  EXPECT_THROW(ct.decode_samples(-1, 2), InvalidInput);
  EXPECT_THROW(ct.decode_samples(2, 2), InvalidInput);
  EXPECT_THROW(ct.decode_samples(3, 5), InvalidInput);
  EXPECT_THROW(encode_per_group(at::randn({40}), opts(2)).decode_samples(0, 1), InvalidInput);
  EXPECT_THROW(CompressedTensor().decode_samples(0, 1), InvalidInput);
}
