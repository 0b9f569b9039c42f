// Greedy mixed-precision allocation against the exact DP.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "actkit/core/bit_allocation.h"
#include "actkit/core/errors.h"

using namespace actkit;

namespace {

int64_t bits_used(const std::vector<BitItem>& items, const std::vector<uint8_t>& bits) {
  int64_t used = 0;
  for (size_t i = 0; i < items.size(); ++i) used += items[i].values * bits[i];
  return used;
}

}  // namespace

// Compares greedy and exact over many random instances: the objective summed
// over all instances within 1%, at least 99% of instances within 1% each,
// and none beyond 10% (the greedy is a heuristic for a knapsack problem; its
// only gap is the granularity of items that are a sizeable part of the
// budget, which real layers with 10^4+ values per sample never are).
void expect_near_optimal(const std::vector<std::vector<BitItem>>& instances, const std::vector<double>& avg_bits) {
  double greedy_total = 0, exact_total = 0, worst = 1;
  int within = 0, count = 0;
  for (const auto& items : instances) {
    int64_t total_dim = 0;
    for (const auto& it : items) total_dim += it.values;
    for (double avg : avg_bits) {
      const int64_t budget = int64_t(avg * double(total_dim));
      const auto greedy = allocate_bits_greedy(items, double(budget));
      const auto exact = allocate_bits_exact(items, budget);
      ASSERT_LE(bits_used(items, greedy), budget);
      ASSERT_LE(bits_used(items, exact), budget);
      const double g = allocation_variance(items, greedy);
      const double e = allocation_variance(items, exact);
      ASSERT_LE(e, g * (1 + 1e-9));
      greedy_total += g;
      exact_total += e;
      worst = std::max(worst, g / e);
      within += g <= e * 1.01;
      ++count;
    }
  }
  EXPECT_LE(greedy_total, exact_total * 1.01);
  EXPECT_GE(within, count * 99 / 100) << within << " of " << count << " within 1%";
  EXPECT_LE(worst, 1.10);
}

TEST(BitAllocation, GreedyIsNearOptimalOnLayerShapedInstances) {
  // Like ActNN's problem: L layers of N samples; samples of a layer share D.
  std::mt19937 rng(3);
  std::lognormal_distribution<double> sample_scale(0.0, 2.0);
  std::uniform_real_distribution<double> layer_scale(-6.0, 6.0);
  std::vector<std::vector<BitItem>> instances;
  for (int trial = 0; trial < 200; ++trial) {
    const int layers = 2 + int(rng() % 3);
    const int samples = 2 + int(rng() % 5);
    std::vector<BitItem> items;
    for (int l = 0; l < layers; ++l) {
      const int64_t dim = 16 + int64_t(rng() % 241);
      const double scale = std::exp(layer_scale(rng));
      for (int n = 0; n < samples; ++n) items.push_back({scale * sample_scale(rng) * double(dim), dim});
    }
    instances.push_back(std::move(items));
  }
  expect_near_optimal(instances, {1.25, 1.5, 2.0, 3.0});
}

TEST(BitAllocation, GreedyIsNearOptimalOnTinyMixedInstances) {
  std::mt19937 rng(5);
  std::lognormal_distribution<double> sens(0.0, 3.0);
  std::vector<std::vector<BitItem>> instances;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<BitItem> items(static_cast<size_t>(4 + rng() % 9));
    for (auto& it : items) {
      it.sensitivity = sens(rng);
      it.values = 1 + int64_t(rng() % 4);
    }
    instances.push_back(std::move(items));
  }
  expect_near_optimal(instances, {1.25, 1.5, 2.0, 3.0, 4.5});
}

TEST(BitAllocation, EqualDimensionsGiveTheExactOptimum) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> sens(0.0, 100.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BitItem> items(10);
    for (auto& it : items) it.sensitivity = sens(rng);
    const int64_t budget = 10 + int64_t(rng() % 70);
    EXPECT_NEAR(allocation_variance(items, allocate_bits_greedy(items, double(budget))),
                allocation_variance(items, allocate_bits_exact(items, budget)), 1e-9);
  }
}

TEST(BitAllocation, MoreSensitiveItemsGetMoreBits) {
  std::vector<BitItem> items = {{1.0, 10}, {100.0, 10}, {10000.0, 10}};
  const auto bits = allocate_bits_greedy(items, 60);  // 2 bits on average
  EXPECT_LE(bits[0], bits[1]);
  EXPECT_LE(bits[1], bits[2]);
  EXPECT_LT(bits[0], bits[2]);
  EXPECT_LE(bits_used(items, bits), 60);
}

TEST(BitAllocation, BudgetBelowTheFloorGivesMinimumBits) {
  std::vector<BitItem> items = {{1.0, 10}, {2.0, 10}};
  EXPECT_EQ(allocate_bits_greedy(items, 5), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(allocate_bits_exact(items, 5), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(allocate_bits_greedy(items, 1000), (std::vector<uint8_t>{8, 8}));
}

TEST(BitAllocation, BadInputsAreRejected) {
  EXPECT_THROW(allocate_bits_greedy({{-1.0, 1}}, 10), InvalidInput);
  EXPECT_THROW(allocate_bits_greedy({{1.0, 0}}, 10), InvalidInput);
  EXPECT_THROW(allocate_bits_greedy({{1.0, 1}}, 10, 0, 8), InvalidInput);
  EXPECT_THROW(allocate_bits_exact({{1.0, 1}}, 2000000), InvalidInput);
}
