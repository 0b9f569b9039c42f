#include "controller/gradient_policy.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cmath>

#include "actkit/core/errors.h"

namespace actkit::detail {
namespace {

// Weight of the newest norm in the moving average: about the last ten
// steps count, so budgets follow a changing gradient within a few steps
// without jumping at one noisy batch.
constexpr double kNewSampleWeight = 0.1;
// Norms kept for fold_norms() before they are folded anyway (a few per
// layer and step; bounds memory when nobody calls step()).
constexpr size_t kMaxPendingNorms = 4096;

}  // namespace

void GradientPolicy::add_layer() { layers_.emplace_back(); }

void GradientPolicy::record_norm(int layer, int64_t samples, at::Tensor norm) {
  pending_.push_back({layer, samples, std::move(norm)});
  if (pending_.size() >= kMaxPendingNorms) fold_norms();
}

void GradientPolicy::fold_norms() {
  if (pending_.empty()) return;
  std::vector<at::Tensor> norms;
  norms.reserve(pending_.size());
  bool one_device = true;
  for (const Norm& p : pending_) {
    norms.push_back(p.norm);
    one_device = one_device && p.norm.device() == pending_.front().norm.device();
  }
  if (!one_device) {
    for (at::Tensor& t : norms) t = t.cpu();
  }
  // One copy, so one wait for the device, per iteration.
  const at::Tensor host = at::stack(norms).to(at::kCPU, at::kDouble).contiguous();
  const double* values = host.data_ptr<double>();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const double sq = values[i] * values[i] / double(pending_[i].samples);
    if (!std::isfinite(sq)) continue;
    LayerGradient& l = layers_[size_t(pending_[i].layer)];
    l.mean_sq = l.seen ? (1 - kNewSampleWeight) * l.mean_sq + kNewSampleWeight * sq : sq;
    l.seen = true;
  }
  pending_.clear();
}

std::vector<double> GradientPolicy::gradient_factors() const {
  std::vector<double> out;
  out.reserve(layers_.size());
  for (const LayerGradient& l : layers_) out.push_back(l.mean_sq);
  return out;
}

void GradientPolicy::end_step(int64_t compressed_bytes) {
  last_step_compressed_ = compressed_bytes - compressed_at_step_start_;
  compressed_at_step_start_ = compressed_bytes;
}

GradientPolicy::Decision GradientPolicy::decide(const LevelConfig& config, int64_t iterations,
                                                int64_t gradient_bytes) {
  bool keep = config.gradients == GradientMemory::kKeep;
  if (config.gradients == GradientMemory::kAuto && config.compresses_anything()) {
    // The first step keeps: the optimizer's state, as large, only appears
    // after it, so keeping costs no peak there.
    keep = iterations == 0 || last_step_compressed_ >= gradient_bytes;
  }
  const Decision d{keep, keep && !kept_};
  kept_ = keep;
  return d;
}

GradientPolicy::State GradientPolicy::state() const {
  if (!pending_.empty()) throw InvalidInput("gradient policy: state taken before the iteration's norms were folded");
  State out;
  out.layers.reserve(layers_.size());
  for (const LayerGradient& l : layers_) out.layers.emplace_back(l.mean_sq, l.seen);
  out.compressed_at_step_start = compressed_at_step_start_;
  out.last_step_compressed = last_step_compressed_;
  out.kept = kept_;
  return out;
}

void GradientPolicy::restore(const State& state) {
  if (state.layers.size() != layers_.size()) {
    throw InvalidInput(c10::str("gradient policy: a state of ", state.layers.size(), " layers for ", layers_.size()));
  }
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i] = {state.layers[i].first, state.layers[i].second};
  pending_.clear();
  compressed_at_step_start_ = state.compressed_at_step_start;
  last_step_compressed_ = state.last_step_compressed;
  kept_ = state.kept;
}

}  // namespace actkit::detail
