// Greedy mixed-precision allocation at ActNN scale: N*L items, O(n log n).
#include <benchmark/benchmark.h>

#include <random>

#include "actkit/core/bit_allocation.h"

namespace {

std::vector<actkit::BitItem> instance(int64_t items, int64_t layers) {
  std::mt19937 rng(1);
  std::lognormal_distribution<double> sens(0.0, 2.0);
  std::vector<actkit::BitItem> out(static_cast<size_t>(items));
  for (int64_t i = 0; i < items; ++i) {
    const int64_t layer = i % layers;
    out[size_t(i)] = {sens(rng) * double(layer + 1), 256 * (1 + layer % 16)};
  }
  return out;
}

void BM_GreedyAllocation(benchmark::State& state) {
  const auto items = instance(state.range(0), 100);
  double budget = 0;
  for (const auto& it : items) budget += 2.0 * double(it.values);
  for (auto _ : state) benchmark::DoNotOptimize(actkit::allocate_bits_greedy(items, budget));
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_GreedyAllocation)
    ->RangeMultiplier(10)
    ->Range(1000, 1000000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity(benchmark::oNLogN);

}  // namespace

BENCHMARK_MAIN();
