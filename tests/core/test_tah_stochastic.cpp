// TAH-Quant with stochastic rounding: unbiased on plain and transformed
// tiles, the variance of the theory, the same quantizer as round-to-nearest
// (only the codes differ, by at most one step), one payload per seed.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <cstring>

#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/kernels/half.h"
#include "actkit/kernels/tah.h"
#include "actkit/kernels/tah_math.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::payload_bytes;
using actkit::test::tah_layout_of;

namespace {

TahOptions tah_sr(int high, int low, bool hadamard, uint64_t seed, bool stochastic = true) {
  TahOptions o;
  o.group_size = 32;
  o.high_bits = high;
  o.low_bits = low;
  o.hadamard = hadamard;
  o.high_fraction = 0.5;
  o.stochastic = stochastic;
  o.seed = seed;
  return o;
}

// Each tile's (zero, scale) from a payload.
std::vector<std::pair<float, float>> sr_tile_params(const CompressedTensor& ct) {
  const kernels::TahLayout L = tah_layout_of(ct);
  const std::vector<uint8_t> bytes = payload_bytes(ct);
  std::vector<std::pair<float, float>> p(size_t(L.num_tiles()));
  for (int64_t i = 0; i < L.num_tiles(); ++i) {
    uint16_t z, s;
    std::memcpy(&z, &bytes[size_t(4 * i)], 2);
    std::memcpy(&s, &bytes[size_t(4 * i + 2)], 2);
    p[size_t(i)] = {kernels::fp16_to_float(z), kernels::fp16_to_float(s)};
  }
  return p;
}

// Activations with two outlier channels: some tiles are transformed.
at::Tensor sr_activations(int64_t tokens, int64_t channels) {
  at::Tensor x = at::randn({tokens, channels}) * 2 + 0.3;
  x.select(1, 5).mul_(40);
  x.select(1, 70).mul_(-25);
  return x;
}

}  // namespace

// E[decode] = x on every tile: the rounding is unbiased and the transform
// linear. Each value's rounding variance is at most scale^2 / 4 (a
// transformed tile spreads its tile's variances by an orthogonal matrix).
TEST(TahStochastic, RoundingIsUnbiasedOnPlainAndTransformedTiles) {
  const at::Tensor x = sr_activations(8, 128);
  constexpr int kSeeds = 2000;
  for (auto [high, low] : {std::pair<int, int>{4, 3}, {2, 1}}) {
    at::Tensor sum = at::zeros_like(x, at::kDouble);
    int64_t transformed = 0;
    for (int s = 0; s < kSeeds; ++s) {
      const CompressedTensor ct = encode_tah(x, tah_sr(high, low, true, uint64_t(s) * 104729 + 1));
      if (s == 0) {
        const kernels::TahLayout L = tah_layout_of(ct);
        const std::vector<uint8_t> bytes = payload_bytes(ct);
        for (int64_t i = 0; i < L.num_tiles(); ++i) {
          transformed += (bytes[size_t(L.flags_offset() + i / 8)] >> (i % 8)) & 1;
        }
      }
      sum += ct.decode().to(at::kDouble);
    }
    ASSERT_GT(transformed, 0) << "no tile was transformed: the test would not cover them";
    // Each value's error in units of its own tile's scale (a transformed
    // tile mixes only its own values), so plain tiles beside the outlier
    // tiles are held to their own, finer bound.
    const CompressedTensor first = encode_tah(x, tah_sr(high, low, true, 1));
    at::Tensor scale = at::empty({int64_t(sr_tile_params(first).size()), 1}, at::kDouble);
    const auto params = sr_tile_params(first);
    for (size_t i = 0; i < params.size(); ++i) scale[int64_t(i)][0] = double(params[i].second);
    const at::Tensor err = ((sum / kSeeds - x.to(at::kDouble)).reshape({-1, 32}) / scale).reshape(x.sizes());
    const double se = 0.5 / std::sqrt(double(kSeeds));  // per value, in steps
    EXPECT_LT(err.abs().max().item<double>(), 6 * se) << high << "/" << low;
    EXPECT_LT(std::abs(err.mean().item<double>()), 4 * se / std::sqrt(double(x.numel()))) << high << "/" << low;
    // Round-to-nearest is biased on the same tiles (the test can fail).
    const at::Tensor rn = encode_tah(x, tah_sr(high, low, true, 0, false)).decode().to(at::kDouble);
    EXPECT_GT(((rn - x.to(at::kDouble)).reshape({-1, 32}) / scale).abs().max().item<double>(), 6 * se)
        << high << "/" << low;
  }
}

// On plain tiles a value at grid position v rounds up with probability
// frac(v): variance frac (1 - frac) scale^2.
TEST(TahStochastic, VarianceMatchesTheory) {
  const at::Tensor x = at::randn({256, 512});
  for (auto [high, low] : {std::pair<int, int>{4, 3}, {2, 1}, {8, 7}}) {
    const CompressedTensor ct = encode_tah(x, tah_sr(high, low, false, 5));
    const auto params = sr_tile_params(ct);
    const at::Tensor tiles = x.to(at::kDouble).reshape({-1, 32});
    at::Tensor zero = at::empty({int64_t(params.size()), 1}, at::kDouble);
    at::Tensor scale = at::empty({int64_t(params.size()), 1}, at::kDouble);
    for (size_t i = 0; i < params.size(); ++i) {
      zero[int64_t(i)][0] = double(params[i].first);
      scale[int64_t(i)][0] = double(params[i].second);
    }
    const at::Tensor v = (tiles - zero) / scale;
    const at::Tensor frac = v - v.floor();
    const double theory = (frac * (1 - frac) * scale * scale).mean().item<double>();
    const double measured = (ct.decode().to(at::kDouble).reshape({-1, 32}) - tiles).pow(2).mean().item<double>();
    EXPECT_NEAR(measured / theory, 1.0, 0.03) << high << "/" << low;
  }
}

// The quantizer (zeros, scales, pivots, flags, token map) is round-to-
// nearest's; each value lands on the grid point below or above, so at most
// one step from the nearest one's.
TEST(TahStochastic, SameQuantizerAndCodesAtMostOneStepFromNearest) {
  const at::Tensor x = sr_activations(16, 256);
  const CompressedTensor rn = encode_tah(x, tah_sr(4, 3, false, 0, false));
  const CompressedTensor sr = encode_tah(x, tah_sr(4, 3, false, 9));
  const kernels::TahLayout L = tah_layout_of(rn);
  const std::vector<uint8_t> a = payload_bytes(rn), b = payload_bytes(sr);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + L.codes_offset(), b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + L.codes_offset(), a.end(), b.begin() + L.codes_offset()));
  const auto params = sr_tile_params(rn);
  const at::Tensor diff = (sr.decode() - rn.decode()).abs().reshape({-1, 32}).amax(1);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LE(diff[int64_t(i)].item<float>(), params[i].second * (1 + 1e-5f) + 1e-6f) << "tile " << i;
  }
}

// One payload per seed, whatever the thread count and the input's strides;
// another seed another payload.
TEST(TahStochastic, OnePayloadPerSeed) {
  const at::Tensor x = sr_activations(64, 256);
  const TahOptions o = tah_sr(4, 3, true, 21);
  const std::vector<uint8_t> want = payload_bytes(encode_tah(x, o));
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    EXPECT_EQ(payload_bytes(encode_tah(x, o)), want);
  }
  EXPECT_EQ(payload_bytes(encode_tah(x.t().contiguous().t(), o)), want);
  EXPECT_NE(payload_bytes(encode_tah(x, tah_sr(4, 3, true, 22))), want);
}

// The documented stream: on plain tiles value (t, k) rounds up exactly when
// counter_uniform(make_rng_key(seed), t * C + k) is below its fraction, so a
// reused draw or a wrong index (another tile's, another token's) fails here.
TEST(TahStochastic, CodesFollowTheDocumentedStream) {
  const at::Tensor x = at::randn({12, 96});
  const uint64_t seed = 1234;
  const CompressedTensor ct = encode_tah(x, tah_sr(3, 2, false, seed));
  const kernels::TahLayout L = tah_layout_of(ct);
  const auto params = sr_tile_params(ct);
  const std::vector<uint8_t> bytes = payload_bytes(ct);
  const kernels::RngKey key = kernels::make_rng_key(seed);
  const at::Tensor decoded = ct.decode().contiguous();
  const float* in = x.data_ptr<float>();
  const float* out = decoded.data_ptr<float>();
  for (int64_t t = 0; t < L.num_tokens; ++t) {
    const bool high = ((bytes[size_t(L.map_offset() + t / 8)] >> (t % 8)) & 1) != 0;
    const float top = float((1 << (high ? L.high_bits : L.low_bits)) - 1);
    for (int64_t k = 0; k < L.channels; ++k) {
      const auto [zero, scale] = params[size_t(t * L.tiles_per_token() + k / L.group_size)];
      const float u = kernels::counter_uniform(key, uint64_t(t * L.channels + k));
      const uint8_t q = kernels::tah_code_stochastic(in[t * L.channels + k], zero, scale > 0 ? 1.0f / scale : 0.0f,
                                                      top, u);
      ASSERT_EQ(out[t * L.channels + k], kernels::tah_value(q, zero, scale)) << "token " << t << " channel " << k;
    }
  }
}
