// Fine-grained mixed precision (ActNN Sec. 4.2-4.3): choose bits
// b_i in 1..8 for items i (a sample at a layer) to minimize the gradient
// variance sum_i w_i / B_i^2, with B_i = 2^b_i - 1, under a bit budget
// sum_i D_i * b_i <= budget.
#pragma once

#include <cstdint>
#include <vector>

namespace actkit {

struct BitItem {
  double sensitivity = 0;  // w_i >= 0
  int64_t values = 1;      // D_i > 0: how many values share b_i
};

// Variance term of one item at `bits`: w / (2^bits - 1)^2.
double variance_at(double sensitivity, int bits);

// Objective sum_i w_i / B_i^2 of an allocation.
double allocation_variance(const std::vector<BitItem>& items, const std::vector<uint8_t>& bits);

// Greedy allocation with a binary heap: every item starts at `max_bits` and
// the move that adds the least variance per bit still needed is applied
// until the budget holds, then leftover bits are spent where they remove the
// most variance; O(n log n) for n items. Up to 4096 items, a few exchange
// rounds (force one item up or down, re-balance the rest) recover most of
// the knapsack granularity loss of small instances. Items never go below `min_bits`; if
// even that exceeds the budget, all items get min_bits. Throws InvalidInput
// for a negative sensitivity, non-positive values or bad bit bounds.
std::vector<uint8_t> allocate_bits_greedy(const std::vector<BitItem>& items, double budget, int min_bits = 1,
                                          int max_bits = 8);

// Exact minimum by dynamic programming over the budget; the reference the
// greedy is tested against. Cost O(n * budget * 8): small instances only
// (throws InvalidInput if the budget exceeds 1e6 bits).
std::vector<uint8_t> allocate_bits_exact(const std::vector<BitItem>& items, int64_t budget, int min_bits = 1,
                                         int max_bits = 8);

}  // namespace actkit
