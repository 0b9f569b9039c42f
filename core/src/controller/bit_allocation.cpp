#include "actkit/core/bit_allocation.h"

#include <c10/util/StringUtil.h>

#include <cmath>
#include <limits>
#include <queue>

#include "actkit/core/errors.h"

namespace actkit {
namespace {

void check_items(const std::vector<BitItem>& items, int min_bits, int max_bits) {
  if (min_bits < 1 || max_bits > 8 || min_bits > max_bits) {
    throw InvalidInput(c10::str("bit bounds must satisfy 1 <= min <= max <= 8, got ", min_bits, "..", max_bits));
  }
  for (const BitItem& it : items) {
    if (!(it.sensitivity >= 0) || !std::isfinite(it.sensitivity)) {
      throw InvalidInput(c10::str("sensitivity must be finite and >= 0, got ", it.sensitivity));
    }
    if (it.values <= 0) throw InvalidInput(c10::str("values must be > 0, got ", it.values));
  }
}

}  // namespace

double variance_at(double sensitivity, int bits) {
  const double B = double((1 << bits) - 1);
  return sensitivity / (B * B);
}

double allocation_variance(const std::vector<BitItem>& items, const std::vector<uint8_t>& bits) {
  double v = 0;
  for (size_t i = 0; i < items.size(); ++i) v += variance_at(items[i].sensitivity, bits[i]);
  return v;
}

namespace {

// State of a greedy pass: current bits and the bits they use.
struct Allocation {
  std::vector<uint8_t> bits;
  double used = 0;
};

struct Move {
  double cost;
  size_t item;
  bool operator>(const Move& o) const { return cost > o.cost || (cost == o.cost && item > o.item); }
  bool operator<(const Move& o) const { return cost < o.cost || (cost == o.cost && item < o.item); }
};

// Added variance per bit saved when lowering item i from b to b - 1.
double lower_cost(const BitItem& it, int b) {
  return (variance_at(it.sensitivity, b - 1) - variance_at(it.sensitivity, b)) / double(it.values);
}

// Removed variance per bit spent when raising item i from b to b + 1.
double raise_gain(const BitItem& it, int b) {
  return (variance_at(it.sensitivity, b) - variance_at(it.sensitivity, b + 1)) / double(it.values);
}

// Lowers items (`pinned` is left alone throughout) until the budget holds, always applying the
// move with the least added variance per bit still *needed*:
// cost / min(D, deficit). Items narrower than the deficit are ranked by cost
// per bit (heap `narrow`); a wider one would finish the descent at once, so
// it is ranked by its total cost over the deficit (heap `wide`). The deficit
// only shrinks, so an item never leaves `wide`, and a wide item buried in
// `narrow` cannot be the best move (its true key exceeds the top's).
// Then spends any slack left on the raises with the best gain per bit that
// still fit.
void descend_and_refill(const std::vector<BitItem>& items, double budget, int min_bits, int max_bits,
                        size_t pinned, Allocation& a) {
  std::vector<Move> initial;
  initial.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (i != pinned && a.bits[i] > min_bits) initial.push_back({lower_cost(items[i], a.bits[i]), i});
  }
  using MinHeap = std::priority_queue<Move, std::vector<Move>, std::greater<Move>>;
  MinHeap narrow(std::greater<Move>(), std::move(initial));
  MinHeap wide;  // key: total added variance of the item's next lowering
  while (a.used > budget) {
    const double deficit = a.used - budget;
    while (!narrow.empty() && double(items[narrow.top().item].values) > deficit) {
      const size_t i = narrow.top().item;
      narrow.pop();
      wide.push({lower_cost(items[i], a.bits[i]) * double(items[i].values), i});
    }
    if (narrow.empty() && wide.empty()) break;  // everything is at min_bits
    const bool take_wide = narrow.empty() || (!wide.empty() && wide.top().cost / deficit < narrow.top().cost);
    const size_t i = take_wide ? wide.top().item : narrow.top().item;
    if (take_wide) {
      wide.pop();
    } else {
      narrow.pop();
    }
    --a.bits[i];
    a.used -= double(items[i].values);
    if (a.bits[i] > min_bits) narrow.push({lower_cost(items[i], a.bits[i]), i});
  }
  std::priority_queue<Move> raise;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i != pinned && a.bits[i] < max_bits) raise.push({raise_gain(items[i], a.bits[i]), i});
  }
  while (!raise.empty()) {
    const size_t i = raise.top().item;
    raise.pop();
    if (a.used + double(items[i].values) > budget) continue;  // slack only shrinks: never fits later
    ++a.bits[i];
    a.used += double(items[i].values);
    if (a.bits[i] < max_bits) raise.push({raise_gain(items[i], a.bits[i]), i});
  }
}

// Items whose next raise removes the most variance per bit: the candidates
// for the exchange step.
std::vector<size_t> best_raises(const std::vector<BitItem>& items, const Allocation& a, int max_bits, size_t k) {
  std::priority_queue<Move, std::vector<Move>, std::greater<Move>> top;  // min-heap of the k best
  for (size_t i = 0; i < items.size(); ++i) {
    if (a.bits[i] >= max_bits) continue;
    top.push({raise_gain(items[i], a.bits[i]), i});
    if (top.size() > k) top.pop();
  }
  std::vector<size_t> out;
  for (; !top.empty(); top.pop()) out.push_back(top.top().item);
  return out;
}

// Items whose next lowering adds the least variance per bit.
std::vector<size_t> cheapest_lowerings(const std::vector<BitItem>& items, const Allocation& a, int min_bits,
                                       size_t k) {
  std::priority_queue<Move> top;  // max-heap of the k cheapest
  for (size_t i = 0; i < items.size(); ++i) {
    if (a.bits[i] <= min_bits) continue;
    top.push({lower_cost(items[i], a.bits[i]), i});
    if (top.size() > k) top.pop();
  }
  std::vector<size_t> out;
  for (; !top.empty(); top.pop()) out.push_back(top.top().item);
  return out;
}

}  // namespace

std::vector<uint8_t> allocate_bits_greedy(const std::vector<BitItem>& items, double budget, int min_bits,
                                          int max_bits) {
  check_items(items, min_bits, max_bits);
  Allocation best;
  best.bits.assign(items.size(), uint8_t(max_bits));
  for (const BitItem& it : items) best.used += double(it.values) * max_bits;
  const size_t none = items.size();
  descend_and_refill(items, budget, min_bits, max_bits, none, best);
  if (best.used > budget) return best.bits;  // even the floor does not fit
  double best_var = allocation_variance(items, best.bits);

  // Exchange steps: the heap greedy is optimal up to the granularity of its
  // last moves, which matters when one item is a sizeable part of the
  // budget. Forcing one more bit on a promising item (or one bit less on a
  // cheap one) and re-balancing the others recovers those multi-item
  // exchanges. A fixed number of candidates and rounds keeps the whole
  // O(n log n).
  // With many items each one is a tiny part of the budget and the plain
  // greedy is already within rounding of the optimum; the exchange steps
  // (kCandidates * kRounds descents) would only cost time there.
  constexpr size_t kCandidates = 16;
  constexpr int kRounds = 4;
  constexpr size_t kExchangeMaxItems = 4096;
  const int rounds = items.size() <= kExchangeMaxItems ? kRounds : 0;
  for (int round = 0; round < rounds; ++round) {
    bool improved = false;
    auto consider = [&](Allocation&& trial) {
      if (trial.used > budget) return;
      const double v = allocation_variance(items, trial.bits);
      if (v < best_var * (1 - 1e-12)) {
        best_var = v;
        best = std::move(trial);
        improved = true;
      }
    };
    const Allocation start = best;
    for (size_t j : best_raises(items, start, max_bits, kCandidates)) {
      Allocation trial = start;
      ++trial.bits[j];
      trial.used += double(items[j].values);
      descend_and_refill(items, budget, min_bits, max_bits, j, trial);
      consider(std::move(trial));
    }
    for (size_t j : cheapest_lowerings(items, start, min_bits, kCandidates)) {
      Allocation trial = start;
      --trial.bits[j];
      trial.used -= double(items[j].values);
      descend_and_refill(items, budget, min_bits, max_bits, j, trial);
      consider(std::move(trial));
    }
    if (!improved) break;
  }
  return best.bits;
}

std::vector<uint8_t> allocate_bits_exact(const std::vector<BitItem>& items, int64_t budget, int min_bits,
                                         int max_bits) {
  check_items(items, min_bits, max_bits);
  if (budget > 1000000) throw InvalidInput("allocate_bits_exact: budget too large for the exact solver");
  const size_t n = items.size();
  int64_t floor_cost = 0;
  for (const BitItem& it : items) floor_cost += it.values * min_bits;
  std::vector<uint8_t> bits(n, uint8_t(min_bits));
  if (budget < floor_cost || n == 0) return bits;
  // best[i][c]: least variance of items [0, i) using exactly c extra bits
  // above the minimum; choice[i][c] the bits given to item i-1.
  const int64_t extra = budget - floor_cost;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(n + 1, std::vector<double>(size_t(extra + 1), inf));
  std::vector<std::vector<uint8_t>> choice(n + 1, std::vector<uint8_t>(size_t(extra + 1), 0));
  best[0][0] = 0;
  for (size_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c <= extra; ++c) {
      if (best[i][size_t(c)] == inf) continue;
      for (int b = min_bits; b <= max_bits; ++b) {
        const int64_t c2 = c + items[i].values * (b - min_bits);
        if (c2 > extra) break;
        const double v = best[i][size_t(c)] + variance_at(items[i].sensitivity, b);
        if (v < best[i + 1][size_t(c2)]) {
          best[i + 1][size_t(c2)] = v;
          choice[i + 1][size_t(c2)] = uint8_t(b);
        }
      }
    }
  }
  int64_t c = 0;
  for (int64_t k = 0; k <= extra; ++k) {
    if (best[n][size_t(k)] < best[n][size_t(c)]) c = k;
  }
  for (size_t i = n; i > 0; --i) {
    bits[i - 1] = choice[i][size_t(c)];
    c -= items[i - 1].values * (bits[i - 1] - min_bits);
  }
  return bits;
}

}  // namespace actkit
