// The controller's bit budgets (ActNN Sec. 4.2-4.3 and App. B): how many
// bits each saved tensor gets.
//
// A budget belongs to one saved tensor of a layer, a (layer, slot) pair:
// most layers save one tensor (slot 0); QMatMul saves both operands (slots
// 0 and 1), which differ in size (attention's p is T/d times v), so each
// is priced at its own element count.
//
//   forward   sample_bits() splits a tensor's budget over its samples
//             (greedy, minimising sum_n w_n / B_n^2) and records the
//             samples as items for reallocate(); uniform_bits() serves
//             tensors that cannot be split by sample (a batch of one);
//   step()    reallocate() solves one allocation over every item recorded
//             since the last call, each item priced at its own values, and
//             sets each budget to the value-weighted average it received.
//
// Not thread-safe: the Controller serialises every call.
#pragma once

#include <cstdint>
#include <vector>

#include "actkit/core/bit_allocation.h"

namespace actkit::detail {

class BitBudgets {
 public:
  // Saved tensors per layer: slots are 0..kMaxSlots-1 (QMatMul uses two).
  static constexpr int kMaxSlots = 4;

  // Every budget starts at `bits` (the level's average, in [1, 8] when
  // anything is quantized).
  explicit BitBudgets(double bits) : initial_bits_(bits) {}

  // Adds a layer with a budget per slot; layers are numbered in the order
  // they are added, as the Controller numbers them.
  void add_layer();

  // Per-sample bits for a tensor of range_sq.size() samples, each of
  // `values_per_sample` values with squared group ranges range_sq[n]
  // (||R_n||^2), saved by (layer, slot). The samples' bits average at most
  // the slot's budget. Records sensitivity_scale * G/6 * ||R_n||^2 per
  // sample for reallocate(). Requires values_per_sample > 0 and a
  // non-empty range_sq; throws InvalidInput for an unknown layer or slot.
  std::vector<uint8_t> sample_bits(int layer, int slot, const std::vector<double>& range_sq,
                                   int64_t values_per_sample, int group_size, double sensitivity_scale);

  // Bits for a tensor of `values` values saved by (layer, slot) whole, at
  // one width. A fractional budget b is honoured over calls by error
  // diffusion: each call takes floor(b) or ceil(b), ceil only while the
  // bits used so far stay within the budget, so the running average never
  // exceeds b and falls short of it by less than one call's worth.
  int uniform_bits(int layer, int slot, int64_t values);

  // Re-solves the allocation over every item recorded since the last call,
  // item weight = its sensitivity * gradient_factor[layer] (the layer's
  // E||grad||^2), under a total of `bits` per recorded value; each slot that
  // recorded items gets the value-weighted average of their bits as its
  // next budget. Clears the items. gradient_factor has one entry per layer.
  void reallocate(const std::vector<double>& gradient_factor, double bits);

  // A layer's budget: its slots' budgets weighted by the values each
  // recorded at the last reallocate() (equal weights before any).
  double layer_bits(int layer) const;

  // What carries over from one iteration to the next, per slot: the budget,
  // the bits uniform_bits() owes it, and the values it recorded at the
  // last reallocate(). state() lists every layer's kMaxSlots slots in turn.
  struct SlotState {
    double bits = 0;
    double undercharged = 0;
    int64_t values_weight = 0;
  };
  // Between iterations only: throws InvalidInput while samples recorded
  // since the last reallocate() wait for it.
  std::vector<SlotState> state() const;
  // Replaces every slot's state with what state() returned for as many
  // layers; throws InvalidInput for another count. Drops recorded samples.
  void restore(const std::vector<SlotState>& slots);

 private:
  // One sample recorded in forward.
  struct Item {
    double sensitivity;  // before the gradient factor
    int64_t values;      // values that share the sample's bits
  };
  struct SlotBudget {
    double bits = 0;              // average bits per value
    double undercharged = 0;      // uniform_bits(): bits owed to the budget, sum (budget - used) * values, >= 0
    int64_t values_weight = 0;    // values recorded at the last reallocate(), for layer_bits()
    std::vector<Item> items;      // this iteration's samples
  };
  using LayerBudgets = std::vector<SlotBudget>;

  SlotBudget& slot_at(int layer, int slot);

  double initial_bits_;
  std::vector<LayerBudgets> layers_;
};

}  // namespace actkit::detail
