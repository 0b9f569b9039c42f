#include "controller/bit_budgets.h"

#include <c10/util/StringUtil.h>

#include <cmath>

#include "actkit/core/errors.h"

namespace actkit::detail {

void BitBudgets::add_layer() {
  SlotBudget fresh;
  fresh.bits = initial_bits_;
  layers_.emplace_back(size_t(kMaxSlots), fresh);
}

BitBudgets::SlotBudget& BitBudgets::slot_at(int layer, int slot) {
  if (layer < 0 || layer >= int(layers_.size())) throw InvalidInput(c10::str("unknown layer id ", layer));
  if (slot < 0 || slot >= kMaxSlots) {
    throw InvalidInput(c10::str("saved-tensor slot must be in [0, ", kMaxSlots, "), got ", slot));
  }
  return layers_[size_t(layer)][size_t(slot)];
}

std::vector<uint8_t> BitBudgets::sample_bits(int layer, int slot, const std::vector<double>& range_sq,
                                             int64_t values_per_sample, int group_size, double sensitivity_scale) {
  SlotBudget& s = slot_at(layer, slot);
  std::vector<BitItem> items(range_sq.size());
  for (size_t n = 0; n < range_sq.size(); ++n) {
    // ActNN App. B: a sample's gradient variance at B levels is
    // scale * G/6 * ||R_n||^2 / B^2 times the layer's gradient factor, which
    // is common to the layer's samples and applied in reallocate().
    items[n] = {sensitivity_scale * double(group_size) / 6.0 * range_sq[n], values_per_sample};
  }
  const double budget = s.bits * double(values_per_sample) * double(range_sq.size());
  std::vector<uint8_t> bits = allocate_bits_greedy(items, budget);
  for (const BitItem& it : items) s.items.push_back({it.sensitivity, it.values});
  return bits;
}

int BitBudgets::uniform_bits(int layer, int slot, int64_t values) {
  SlotBudget& s = slot_at(layer, slot);
  const int lo = int(std::floor(s.bits));
  const int hi = int(std::ceil(s.bits));
  const double n = double(values);
  const int bits = hi != lo && s.undercharged + (s.bits - hi) * n >= 0 ? hi : lo;
  s.undercharged += (s.bits - bits) * n;
  return bits;
}

void BitBudgets::reallocate(const std::vector<double>& gradient_factor, double bits) {
  std::vector<BitItem> items;
  std::vector<size_t> owner;  // flat slot index, layer * kMaxSlots + slot
  double budget = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (size_t k = 0; k < layers_[l].size(); ++k) {
      for (const Item& it : layers_[l][k].items) {
        items.push_back({it.sensitivity * gradient_factor[l], it.values});
        owner.push_back(l * kMaxSlots + k);
        budget += bits * double(it.values);
      }
    }
  }
  if (items.empty()) return;
  const std::vector<uint8_t> got = allocate_bits_greedy(items, budget);
  // Per slot: sum of bits * values received, and of values. Each slot's
  // budget is then what its items cost, so the budgets sum to at most
  // `budget` over the recorded values.
  std::vector<double> bit_values(layers_.size() * kMaxSlots, 0.0);
  std::vector<int64_t> values(layers_.size() * kMaxSlots, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    bit_values[owner[i]] += double(got[i]) * double(items[i].values);
    values[owner[i]] += items[i].values;
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (size_t k = 0; k < layers_[l].size(); ++k) {
      SlotBudget& s = layers_[l][k];
      const size_t f = l * kMaxSlots + k;
      if (values[f] > 0) {
        s.bits = bit_values[f] / double(values[f]);
        s.values_weight = values[f];
      }
      s.items.clear();
    }
  }
}

double BitBudgets::layer_bits(int layer) const {
  if (layer < 0 || layer >= int(layers_.size())) throw InvalidInput(c10::str("unknown layer id ", layer));
  double weighted = 0, weight = 0;
  for (const SlotBudget& s : layers_[size_t(layer)]) {
    weighted += s.bits * double(s.values_weight);
    weight += double(s.values_weight);
  }
  return weight > 0 ? weighted / weight : layers_[size_t(layer)][0].bits;
}

std::vector<BitBudgets::SlotState> BitBudgets::state() const {
  std::vector<SlotState> out;
  out.reserve(layers_.size() * size_t(kMaxSlots));
  for (const LayerBudgets& layer : layers_) {
    for (const SlotBudget& s : layer) {
      if (!s.items.empty()) throw InvalidInput("bit budgets: state taken in the middle of an iteration");
      out.push_back({s.bits, s.undercharged, s.values_weight});
    }
  }
  return out;
}

void BitBudgets::restore(const std::vector<SlotState>& slots) {
  if (slots.size() != layers_.size() * size_t(kMaxSlots)) {
    throw InvalidInput(c10::str("bit budgets: a state of ", slots.size(), " slots for ", layers_.size(), " layers of ",
                                kMaxSlots));
  }
  size_t i = 0;
  for (LayerBudgets& layer : layers_) {
    for (SlotBudget& s : layer) {
      s.bits = slots[i].bits;
      s.undercharged = slots[i].undercharged;
      s.values_weight = slots[i].values_weight;
      s.items.clear();
      ++i;
    }
  }
}

}  // namespace actkit::detail
