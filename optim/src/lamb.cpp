// LAMB and 1-bit LAMB (see the header for the arithmetic).
#include "actkit/optim/lamb.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>

#include "actkit/core/errors.h"

namespace actkit::optim {
namespace {

const LambOptions& lamb_options_of(const torch::optim::OptimizerOptions* o) { return static_cast<const LambOptions&>(*o); }

void check(const LambOptions& o) {
  if (!(o.lr() >= 0) || !(o.beta1() >= 0 && o.beta1() < 1) || !(o.beta2() >= 0 && o.beta2() < 1) ||
      !(o.eps() >= 0) || !(o.weight_decay() >= 0) || !(o.c_min() > 0 && o.c_min() <= o.c_max())) {
    throw InvalidInput(c10::str("lamb: lr ", o.lr(), ", betas (", o.beta1(), ", ", o.beta2(), "), eps ", o.eps(),
                                ", weight decay ", o.weight_decay(), ", c in [", o.c_min(), ", ", o.c_max(),
                                "]: expected lr, eps, weight decay >= 0, betas in [0, 1), 0 < c_min <= c_max"));
  }
}

// The update direction u = m / (√v + ε) + wd·x.
torch::Tensor direction(const LambOptions& o, const torch::Tensor& x, const torch::Tensor& m, const torch::Tensor& v) {
  torch::Tensor u = m / (v.sqrt() + o.eps());
  if (o.weight_decay() != 0) u.add_(x, o.weight_decay());
  return u;
}

}  // namespace

double Lamb::frozen_coefficient(const State& s) const {
  // The average of the warm-up's coefficients, bias-corrected as Adam's
  // moments are: c_avg starts at 0, so after k of them it holds only
  // 1 - beta3^k of their level (75 % after 13). No measured coefficient at
  // all: LAMB's own fallback, 1.
  if (s.c_updates == 0) return 1.0;
  return s.c_avg / (1 - std::pow(onebit_.beta3, double(s.c_updates)));
}

Lamb::Lamb(std::vector<torch::optim::OptimizerParamGroup> groups, LambOptions defaults, ExchangeOptions exchange,
           OneBitLambOptions onebit)
    : DataParallelOptimizer(std::move(groups), std::make_unique<LambOptions>(defaults), exchange, "lamb"),
      onebit_(onebit) {
  check(defaults);
  for (const auto& g : param_groups()) check(static_cast<const LambOptions&>(g.options()));
  if (!(onebit.beta3 >= 0 && onebit.beta3 < 1) || !(onebit.r_min > 0 && onebit.r_min <= onebit.r_max) ||
      !(onebit.r_threshold >= 0)) {
    throw InvalidInput(c10::str("lamb: beta3 ", onebit.beta3, ", r in [", onebit.r_min, ", ", onebit.r_max,
                                "], r threshold ", onebit.r_threshold,
                                ": expected beta3 in [0, 1), 0 < r_min <= r_max, threshold >= 0"));
  }
}

std::vector<double> Lamb::coefficients() const {
  std::vector<double> out;
  for (const auto& s : states()) out.push_back(s->last_coefficient);
  return out;
}

void Lamb::warmup_update(Param& p, const torch::Tensor& grad) {
  const LambOptions& o = lamb_options_of(p.options);
  State& s = *p.state;
  if (!s.exp_avg.defined()) {
    s.exp_avg = torch::zeros_like(p.tensor, at::MemoryFormat::Preserve);
    s.exp_avg_sq = torch::zeros_like(p.tensor, at::MemoryFormat::Preserve);
  }
  s.step += 1;
  s.variance_steps += 1;
  s.exp_avg.mul_(o.beta1()).add_(grad, 1 - o.beta1());
  s.exp_avg_sq.mul_(o.beta2()).addcmul_(grad, grad, 1 - o.beta2());
  const torch::Tensor u = direction(o, p.tensor, s.exp_avg, s.exp_avg_sq);
  const double weight_norm = p.tensor.norm().item<double>();
  const double update_norm = u.norm().item<double>();
  double c = 1;
  if (weight_norm > 0 && update_norm > 0) {
    c = std::clamp(weight_norm / update_norm, o.c_min(), o.c_max());
    // Only a measured coefficient goes into the average the compression
    // stage scales by (DeepSpeed's rule): the fallback 1 of a zero tensor
    // (a zero-initialised bias at its first step) is no measure of its
    // layer and would be 3-100x the clipped ones.
    s.c_avg = onebit_.beta3 * s.c_avg + (1 - onebit_.beta3) * c;
    ++s.c_updates;
  }
  s.last_coefficient = c;
  p.tensor.add_(u, -o.lr() * c);
}

void Lamb::freeze(std::vector<Param>& params) {
  // §4.3: every tensor's momentum brought to the mean scale before the
  // fused 1-bit compression, which has one scale per chunk.
  std::vector<double> scales;
  double mean = 0;
  for (Param& p : params) {
    const double scale = p.state->exp_avg.norm().item<double>() / std::sqrt(double(p.tensor.numel()));
    scales.push_back(scale);
    mean += scale / double(params.size());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    State& s = *params[i].state;
    s.momentum_scale = scales[i] > 0 && mean > 0 ? mean / scales[i] : 1.0;
    s.fresh_sq = s.exp_avg_sq.clone();
    s.ratio = 1;
  }
}

void Lamb::local_momentum(Param& p, const torch::Tensor& grad, torch::Tensor m) {
  const LambOptions& o = lamb_options_of(p.options);
  m.copy_(p.state->exp_avg).mul_(o.beta1()).add_(grad, 1 - o.beta1()).mul_(p.state->momentum_scale);
}

void Lamb::compressed_update(Param& p, const torch::Tensor& scaled) {
  const LambOptions& o = lamb_options_of(p.options);
  State& s = *p.state;
  s.step += 1;
  const torch::Tensor m = scaled / s.momentum_scale;
  // The gradient this momentum implies, into the fresh variance (lines 15-16).
  const torch::Tensor g = (m - s.exp_avg * o.beta1()) / (1 - o.beta1());
  s.fresh_sq.mul_(o.beta2()).addcmul_(g, g, 1 - o.beta2());
  s.exp_avg.copy_(m);
  // Lines 17-20: how far the frozen variance is from the fresh one, as the
  // ratio of the update's denominators (√v_f + ε)/(√v_fresh + ε), which is
  // what the frozen variance does to the step: the ratio of the variances
  // squares it, and since ĝ carries ten times the 1-bit compression's noise
  // (÷ (1 − β1)), v_fresh sits far above v_f and that square pulls r to
  // r_min (measured: 1-bit LAMB 4.4% behind LAMB on the LM benchmark with
  // the square, 0.8% with this; docs/data-parallel.md).
  double r = ((s.exp_avg_sq.sqrt() + o.eps()) / (s.fresh_sq.sqrt() + o.eps())).max().item<double>();
  if (!std::isfinite(r)) r = s.ratio;
  r = std::clamp(r, (1 - onebit_.r_threshold) * s.ratio, (1 + onebit_.r_threshold) * s.ratio);
  r = std::clamp(r, onebit_.r_min, onebit_.r_max);
  s.ratio = r;
  const double c = r * frozen_coefficient(s);
  s.last_coefficient = c;
  p.tensor.add_(direction(o, p.tensor, s.exp_avg, s.exp_avg_sq), -o.lr() * c);
}

}  // namespace actkit::optim
