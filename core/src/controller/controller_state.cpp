// Controller::save_state / load_state: the controller's between-step state
// as bytes (docs/formats.md, "Controller state"):
//
//   0   4  magic "AKCS"
//   4   2  format version (1)
//   6   1  mixed precision (0 or 1)
//   7   1  reserved, 0
//   8   8  level bits (f64)
//   16  4  group size
//   20  4  layer count L
//   24  8  seed
//   32  ..  L layer records, in registration order:
//          4 name length n, n bytes of name, 1 kind,
//          8 rounding counter (save() calls that compressed),
//          4 slots x (8 budget bits f64, 8 undercharged bits f64, 8 values at the last re-allocation),
//          8 E||grad||^2 per sample (f64), 1 whether it has been measured
//   ..  8  payload total when the last step began, 8 payload bytes of the last step, 1 gradients kept
//   ..  7 x 8  ControllerStats, in declaration order
//   ..  4  CRC-32C of everything before it
//
// Integers little-endian, signed where the field can be; every length is
// checked against the bytes given before it is read.
#include <c10/util/StringUtil.h>

#include "actkit/core/checksum.h"
#include "actkit/core/controller.h"
#include "actkit/core/errors.h"
#include "controller/bit_budgets.h"
#include "byte_io.h"
#include "controller/gradient_policy.h"

namespace actkit {
namespace {

constexpr char kStateMagic[4] = {'A', 'K', 'C', 'S'};
constexpr uint16_t kStateVersion = 1;
constexpr size_t kStateHeader = 32;
constexpr size_t kSlotBytes = 24;
constexpr size_t kPolicyBytes = 17;
constexpr size_t kStatsBytes = 7 * 8;
constexpr size_t kCrcBytes = 4;

size_t layer_record_bytes(const std::string& name) {
  return 4 + name.size() + 1 + 8 + size_t(detail::BitBudgets::kMaxSlots) * kSlotBytes + 8 + 1;
}

}  // namespace

std::vector<uint8_t> Controller::save_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<detail::BitBudgets::SlotState> slots = budgets_->state();
  const detail::GradientPolicy::State policy = gradients_->state();
  size_t total = kStateHeader + kPolicyBytes + kStatsBytes + kCrcBytes;
  for (const LayerRecord& l : layers_) total += layer_record_bytes(l.name);
  std::vector<uint8_t> out(total);
  detail::Writer w(out.data());
  w.put_bytes(kStateMagic, 4);
  w.put<uint16_t>(kStateVersion);
  w.put<uint8_t>(config_.mixed_precision ? 1 : 0);
  w.put<uint8_t>(0);
  w.put<double>(config_.bits);
  w.put<uint32_t>(uint32_t(config_.group_size));
  w.put<uint32_t>(uint32_t(layers_.size()));
  w.put<uint64_t>(seed_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerRecord& l = layers_[i];
    w.put<uint32_t>(uint32_t(l.name.size()));
    w.put_bytes(l.name.data(), l.name.size());
    w.put<uint8_t>(uint8_t(l.kind));
    w.put<int64_t>(l.saves);
    for (int s = 0; s < detail::BitBudgets::kMaxSlots; ++s) {
      const auto& slot = slots[i * size_t(detail::BitBudgets::kMaxSlots) + size_t(s)];
      w.put<double>(slot.bits);
      w.put<double>(slot.undercharged);
      w.put<int64_t>(slot.values_weight);
    }
    w.put<double>(policy.layers[i].first);
    w.put<uint8_t>(policy.layers[i].second ? 1 : 0);
  }
  w.put<int64_t>(policy.compressed_at_step_start);
  w.put<int64_t>(policy.last_step_compressed);
  w.put<uint8_t>(policy.kept ? 1 : 0);
  for (int64_t v : {stats_.iterations, stats_.compress_calls, stats_.shared_hits, stats_.input_bytes,
                    stats_.compressed_bytes, stats_.quantized_values, stats_.code_bits}) {
    w.put<int64_t>(v);
  }
  w.put<uint32_t>(crc32c(out.data(), total - kCrcBytes));
  TORCH_INTERNAL_ASSERT(w.pos() == out.data() + total, "controller state: size miscounted");
  return out;
}

void Controller::load_state(const std::vector<uint8_t>& bytes) {
  const char* what = "controller state";
  if (bytes.size() < kStateHeader + kPolicyBytes + kStatsBytes + kCrcBytes) {
    throw FormatError(c10::str("controller state: ", bytes.size(), " bytes, shorter than any state"));
  }
  if (std::memcmp(bytes.data(), kStateMagic, 4) != 0) throw FormatError("controller state: bad magic");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - kCrcBytes, kCrcBytes);
  if (crc32c(bytes.data(), bytes.size() - kCrcBytes) != stored_crc) {
    throw FormatError("controller state: checksum mismatch (damaged)");
  }
  detail::Reader r(bytes.data() + 4, bytes.size() - 4 - kCrcBytes, what);
  const auto version = r.get<uint16_t>("version");
  if (version != kStateVersion) throw FormatError(c10::str("controller state: unknown version ", version));
  const bool mixed = r.get<uint8_t>("mixed precision") != 0;
  r.get<uint8_t>("reserved");
  const double bits = r.get<double>("level bits");
  const uint32_t group = r.get<uint32_t>("group size");
  const uint32_t count = r.get<uint32_t>("layer count");
  const uint64_t seed = r.get<uint64_t>("seed");

  std::lock_guard<std::mutex> lock(mu_);
  if (mixed != config_.mixed_precision || bits != config_.bits || int64_t(group) != config_.group_size) {
    throw FormatError(c10::str("controller state: saved for ", bits, " bits, groups of ", group,
                               mixed ? ", mixed precision" : ", uniform bits", "; this level has ", config_.bits,
                               " bits, groups of ", config_.group_size,
                               config_.mixed_precision ? ", mixed precision" : ", uniform bits"));
  }
  if (seed != seed_) throw FormatError(c10::str("controller state: saved with seed ", seed, ", this run has ", seed_));
  if (size_t(count) != layers_.size()) {
    throw FormatError(c10::str("controller state: saved for ", count, " layers, this model has ", layers_.size()));
  }
  std::vector<int64_t> saves(count);
  std::vector<detail::BitBudgets::SlotState> slots(size_t(count) * size_t(detail::BitBudgets::kMaxSlots));
  detail::GradientPolicy::State policy;
  policy.layers.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t n = r.get<uint32_t>("layer name length");
    const auto* name = reinterpret_cast<const char*>(r.take(n, "layer name"));
    const auto kind = r.get<uint8_t>("layer kind");
    const LayerRecord& l = layers_[i];
    if (std::string(name, n) != l.name || kind != uint8_t(l.kind)) {
      throw FormatError(c10::str("controller state: layer ", i, " was ", std::string(name, n), " (",
                                 int(kind), "), this model's is ", l.name, " (", int(l.kind), ")"));
    }
    saves[i] = r.get<int64_t>("rounding counter");
    for (int s = 0; s < detail::BitBudgets::kMaxSlots; ++s) {
      auto& slot = slots[size_t(i) * size_t(detail::BitBudgets::kMaxSlots) + size_t(s)];
      slot.bits = r.get<double>("slot bits");
      slot.undercharged = r.get<double>("slot undercharged bits");
      slot.values_weight = r.get<int64_t>("slot values");
    }
    policy.layers[i].first = r.get<double>("gradient average");
    policy.layers[i].second = r.get<uint8_t>("gradient measured") != 0;
  }
  policy.compressed_at_step_start = r.get<int64_t>("payload total at step start");
  policy.last_step_compressed = r.get<int64_t>("payload bytes of the last step");
  policy.kept = r.get<uint8_t>("gradients kept") != 0;
  ControllerStats stats;
  for (int64_t* v : {&stats.iterations, &stats.compress_calls, &stats.shared_hits, &stats.input_bytes,
                     &stats.compressed_bytes, &stats.quantized_values, &stats.code_bits}) {
    *v = r.get<int64_t>("statistics");
  }
  if (r.left() != 0) throw FormatError(c10::str("controller state: ", r.left(), " bytes after its end"));

  // Everything parsed and matched: only now does the controller change.
  budgets_->restore(slots);
  gradients_->restore(policy);
  for (uint32_t i = 0; i < count; ++i) layers_[i].saves = saves[i];
  stats_ = stats;
}

}  // namespace actkit
