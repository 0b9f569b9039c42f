// The Controller: the layer registry, save()'s path through the jobs
// (sharing cache -> bit budgets -> codec -> offload routing) and the stats.
#include "actkit/core/controller.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cmath>

#include "actkit/core/errors.h"
#include "actkit/core/gradients.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/core/sample_ranges.h"
#include "controller/bit_budgets.h"
#include "controller/gradient_policy.h"
#include "controller/offload_routing.h"
#include "controller/sharing_cache.h"

namespace actkit {
namespace {

// Code bits of a per-group payload (metadata excluded).
int64_t code_bits_of(const CompressedMeta& m) {
  if (m.bits != 0) return m.num_samples() * m.sample_size() * m.bits;
  int64_t bits = 0;
  for (uint8_t b : m.sample_bits) bits += int64_t(b);
  return bits * m.sample_size();
}

}  // namespace

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv: return "conv";
    case LayerKind::kLinear: return "linear";
    case LayerKind::kNorm: return "norm";
    case LayerKind::kActivation: return "activation";
  }
  return "unknown";
}

Controller::Controller(LevelConfig config, uint64_t seed, std::shared_ptr<ActivationOffload> offload)
    : config_(with_overrides(config, {})),  // validates
      seed_(seed),
      offload_(std::make_unique<detail::OffloadRouting>(config_, std::move(offload))),
      budgets_(std::make_unique<detail::BitBudgets>(config_.bits)),
      shared_(std::make_unique<detail::SharingCache>()),
      gradients_(std::make_unique<detail::GradientPolicy>()) {}

Controller::~Controller() = default;

// --- layer registry ---------------------------------------------------------

int Controller::register_layer(const std::string& name, LayerKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  layers_.push_back({name, kind});
  budgets_->add_layer();
  gradients_->add_layer();
  return int(layers_.size()) - 1;
}

const Controller::LayerRecord& Controller::layer_at(int layer) const {
  if (layer < 0 || layer >= int(layers_.size())) throw InvalidInput(c10::str("unknown layer id ", layer));
  return layers_[size_t(layer)];
}

std::string Controller::layer_name(int layer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return layer_at(layer).name;
}

int Controller::num_layers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(layers_.size());
}

bool Controller::compresses(LayerKind kind) const {
  switch (kind) {
    case LayerKind::kConv: return config_.compress_conv;
    case LayerKind::kLinear: return config_.compress_linear;
    case LayerKind::kNorm: return config_.compress_norm;
    case LayerKind::kActivation: return config_.compress_activation;
  }
  return false;
}

double Controller::layer_bits(int layer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return budgets_->layer_bits(layer);
}

// --- saving -----------------------------------------------------------------

SavedActivation Controller::save(int layer, const at::Tensor& x, double sensitivity_scale, int slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    layer_at(layer);  // validates the id before anything else
    if (slot < 0 || slot >= detail::BitBudgets::kMaxSlots) {
      throw InvalidInput(c10::str("save: slot must be in [0, ", detail::BitBudgets::kMaxSlots, "), got ", slot));
    }
    SavedActivation shared;
    if (shared_->lookup(x, &shared)) {
      ++stats_.shared_hits;
      return shared;
    }
  }
  const CompressedTensor ct = encode(layer, slot, x, sensitivity_scale);
  SavedActivation saved = offload_->place(ct);
  std::lock_guard<std::mutex> lock(mu_);
  shared_->remember(x, saved, ct);
  return saved;
}

SavedActivation Controller::keep(CompressedTensor ct, int64_t input_bytes) {
  note_saved(input_bytes, ct.byte_size());
  return offload_->place(ct);
}

CompressedTensor Controller::encode(int layer, int slot, const at::Tensor& x, double sensitivity_scale) {
  PerGroupOptions o;
  o.group_size = config_.group_size;
  o.non_finite = NonFinitePolicy::kPropagate;
  // Per-sample bits need samples: rank >= 2 and more than one of them.
  const bool per_sample = config_.mixed_precision && x.dim() >= 2 && x.size(0) > 1 && x.numel() > 0;
  const int64_t n = per_sample ? x.size(0) : 1;
  const int64_t d = per_sample ? x.numel() / n : x.numel();
  // The ranges are a reduction over x (and a device sync): outside the lock.
  const std::vector<double> range_sq = per_sample ? sample_range_sq(x, o.group_size) : std::vector<double>{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    LayerRecord& l = layers_[size_t(layer)];  // save() validated the id
    o.seed = seed_ ^ (uint64_t(layer) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(l.saves) * 0xd1b54a32d192ed03ull);
    ++l.saves;
    if (per_sample) {
      o.bits = 0;
      o.sample_bits = budgets_->sample_bits(layer, slot, range_sq, d, o.group_size, sensitivity_scale);
    } else {
      o.bits = budgets_->uniform_bits(layer, slot, x.numel());
    }
  }
  CompressedTensor ct = encode_per_group(x, o);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.compress_calls;
  stats_.input_bytes += int64_t(x.numel() * x.element_size());
  stats_.compressed_bytes += ct.byte_size();
  stats_.quantized_values += x.numel();
  stats_.code_bits += code_bits_of(ct.meta());
  return ct;
}

void Controller::note_saved(int64_t input_bytes, int64_t compressed_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.input_bytes += input_bytes;
  stats_.compressed_bytes += compressed_bytes;
}

ControllerStats Controller::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// --- gradients and steps ----------------------------------------------------

void Controller::record_gradient(int layer, const at::Tensor& grad_output) {
  if (!config_.mixed_precision || !grad_output.defined() || grad_output.numel() == 0) return;
  const int64_t n = grad_output.dim() >= 2 ? grad_output.size(0) : 1;
  // A reduction kernel: no temporary the size of the gradient (pow(2) would
  // allocate one at the widest layer, where backward's memory peaks). The
  // norm stays where it was computed until step(): reading it here would
  // wait for the device once per layer of backward.
  at::Tensor norm = at::linalg_vector_norm(grad_output.detach(), 2, c10::nullopt, false, at::kFloat);
  std::lock_guard<std::mutex> lock(mu_);
  layer_at(layer);  // validates
  gradients_->record_norm(layer, n, std::move(norm));
}

void Controller::step() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.iterations;
  gradients_->end_step(stats_.compressed_bytes);
  if (!config_.mixed_precision) return;
  gradients_->fold_norms();
  budgets_->reallocate(gradients_->gradient_factors(), config_.bits);
}

bool Controller::reset_gradients(const std::vector<at::Tensor>& params) {
  const bool automatic = config_.gradients == GradientMemory::kAuto && config_.compresses_anything();
  const int64_t needed = automatic ? gradient_bytes(params) : 0;
  detail::GradientPolicy::Decision d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    d = gradients_->decide(config_, stats_.iterations, needed);
  }
  // Gradients that backward allocated while they were dropped sit wherever
  // that backward found room: kept from now on, they move into one buffer.
  // (If the allocation below throws, the next call finds them dropped or
  // already in place, so nothing is left to regroup.)
  if (d.regroup) actkit::reset_gradients(params, false);
  actkit::reset_gradients(params, d.keep);
  return d.keep;
}

}  // namespace actkit
