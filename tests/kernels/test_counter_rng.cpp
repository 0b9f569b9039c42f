// Statistical sanity of the counter-based generator used for stochastic
// rounding: uniform, decorrelated across neighbouring indices and seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "actkit/kernels/counter_rng.h"

namespace k = actkit::kernels;

TEST(CounterRng, UniformInUnitInterval) {
  const k::RngKey key = k::make_rng_key(42);
  constexpr int kBins = 64;
  constexpr int kDraws = 1 << 20;
  std::vector<int> hist(kBins, 0);
  double sum = 0;
  for (uint64_t i = 0; i < kDraws; ++i) {
    const float u = k::counter_uniform(key, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ++hist[int(u * kBins)];
    sum += u;
  }
  double chi2 = 0;
  const double expect = double(kDraws) / kBins;
  for (int h : hist) chi2 += (h - expect) * (h - expect) / expect;
  // 63 degrees of freedom: P(chi2 > 110) < 1e-4.
  EXPECT_LT(chi2, 110.0);
  EXPECT_NEAR(sum / kDraws, 0.5, 4 * std::sqrt(1.0 / 12 / kDraws));
}

TEST(CounterRng, NeighboursAndSeedsAreUncorrelated) {
  constexpr int kDraws = 1 << 18;
  const k::RngKey a = k::make_rng_key(1);
  const k::RngKey b = k::make_rng_key(2);
  double lag = 0, seeds = 0;
  for (uint64_t i = 0; i < kDraws; ++i) {
    const double u = k::counter_uniform(a, i) - 0.5;
    lag += u * (k::counter_uniform(a, i + 1) - 0.5);
    seeds += u * (k::counter_uniform(b, i) - 0.5);
  }
  // Correlation's standard error is 1/sqrt(n); var(u) = 1/12.
  const double bound = 5.0 / std::sqrt(double(kDraws)) / 12.0;
  EXPECT_LT(std::abs(lag / kDraws), bound);
  EXPECT_LT(std::abs(seeds / kDraws), bound);
}

TEST(CounterRng, HighIndexWordMatters) {
  const k::RngKey key = k::make_rng_key(3);
  int same = 0;
  for (uint32_t lo = 0; lo < 1000; ++lo) same += k::counter_hash(key, lo, 0) == k::counter_hash(key, lo, 1);
  EXPECT_LE(same, 1);
}

TEST(CounterRng, DeterministicForASeed) {
  for (uint64_t i : {0ull, 1ull, 12345ull, (1ull << 40) + 7}) {
    EXPECT_EQ(k::counter_hash(k::make_rng_key(9), uint32_t(i), uint32_t(i >> 32)),
              k::counter_hash(k::make_rng_key(9), uint32_t(i), uint32_t(i >> 32)));
  }
}
