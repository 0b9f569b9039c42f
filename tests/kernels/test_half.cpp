// The bit-level 16-bit float conversions shared by CPU and CUDA kernels.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "actkit/kernels/half.h"

namespace k = actkit::kernels;

namespace {

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || k::float_bits(a) == k::float_bits(b); }

std::vector<float> probe_floats() {
  std::mt19937 rng(7);
  std::vector<float> v;
  for (int i = 0; i < 200000; ++i) v.push_back(k::bits_float(uint32_t(rng())));
  for (float f : {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-30f,
                  3.4e38f, -3.4e38f})
    v.push_back(f);
  return v;
}

}  // namespace

TEST(Half, Fp16ToFloatMatchesC10ForEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = float(c10::Half(uint16_t(h), c10::Half::from_bits()));
    ASSERT_TRUE(same_float(k::fp16_to_float(uint16_t(h)), want)) << std::hex << h;
  }
}

TEST(Half, Bf16ToFloatMatchesC10ForEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    c10::BFloat16 b;
    b.x = uint16_t(h);
    ASSERT_TRUE(same_float(k::bf16_to_float(uint16_t(h)), float(b))) << std::hex << h;
  }
}

TEST(Half, RoundToNearestEvenMatchesC10) {
  for (float f : probe_floats()) {
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(k::fp16_to_float(k::float_to_fp16_rne(f))));
      EXPECT_TRUE(std::isnan(k::bf16_to_float(k::float_to_bf16_rne(f))));
      continue;
    }
    ASSERT_EQ(k::float_to_fp16_rne(f), c10::Half(f).x) << f;
    ASSERT_EQ(k::float_to_bf16_rne(f), c10::BFloat16(f).x) << f;
  }
}

TEST(Half, DirectedRoundingBracketsTheValue) {
  for (auto fmt : {k::MetaFormat::kBFloat16, k::MetaFormat::kFloat16}) {
    for (float f : probe_floats()) {
      if (!std::isfinite(f)) continue;
      const float down = k::meta_to_float(k::float_to_meta_directed(f, fmt, false), fmt);
      const float up = k::meta_to_float(k::float_to_meta_directed(f, fmt, true), fmt);
      ASSERT_LE(down, f) << f;
      ASSERT_GE(up, f) << f;
      // Tight: one unit apart at most, equal when f is representable.
      if (down == f || up == f) {
        ASSERT_EQ(down, up) << f;
      } else {
        const int up_mag = k::float_to_meta_directed(f, fmt, true) & 0x7fff;
        const int down_mag = k::float_to_meta_directed(f, fmt, false) & 0x7fff;
        ASSERT_EQ(std::abs(up_mag - down_mag), 1) << f;
      }
    }
  }
}

TEST(Half, DirectedRoundingOverflowsToInfinity) {
  EXPECT_TRUE(std::isinf(k::meta_to_float(k::float_to_meta_directed(70000.0f, k::MetaFormat::kFloat16, true),
                                          k::MetaFormat::kFloat16)));
  EXPECT_TRUE(std::isinf(k::meta_to_float(k::float_to_meta_directed(-70000.0f, k::MetaFormat::kFloat16, false),
                                          k::MetaFormat::kFloat16)));
  EXPECT_EQ(k::meta_to_float(k::float_to_meta_directed(70000.0f, k::MetaFormat::kFloat16, false),
                             k::MetaFormat::kFloat16),
            65504.0f);
}
