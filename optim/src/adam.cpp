// Adam and 1-bit Adam (see the header). warmup_update is LibTorch's Adam
// step (torch/csrc/api/src/optim/adam.cpp) operation for operation: the
// warm-up must agree with it bit for bit.
#include "actkit/optim/adam.h"

#include <c10/util/StringUtil.h>

#include <cmath>

#include "actkit/core/errors.h"

namespace actkit::optim {
namespace {

const AdamOptions& adam_options_of(const torch::optim::OptimizerOptions* o) {
  return static_cast<const AdamOptions&>(*o);
}

void check(const AdamOptions& o) {
  if (!(o.lr() >= 0) || !(o.beta1() >= 0 && o.beta1() < 1) || !(o.beta2() >= 0 && o.beta2() < 1) ||
      !(o.eps() >= 0) || !(o.weight_decay() >= 0)) {
    throw InvalidInput(c10::str("adam: lr ", o.lr(), ", betas (", o.beta1(), ", ", o.beta2(), "), eps ", o.eps(),
                                ", weight decay ", o.weight_decay(), ": expected lr, eps, weight decay >= 0 and "
                                "betas in [0, 1)"));
  }
}

}  // namespace

Adam::Adam(std::vector<torch::optim::OptimizerParamGroup> groups, AdamOptions defaults, ExchangeOptions exchange)
    : DataParallelOptimizer(std::move(groups), std::make_unique<AdamOptions>(defaults), exchange, "adam") {
  check(defaults);
  for (const auto& g : param_groups()) check(static_cast<const AdamOptions&>(g.options()));
}

void Adam::warmup_update(Param& p, const torch::Tensor& gradient) {
  const AdamOptions& o = adam_options_of(p.options);
  State& s = *p.state;
  if (!s.exp_avg.defined()) {
    s.exp_avg = torch::zeros_like(p.tensor, at::MemoryFormat::Preserve);
    s.exp_avg_sq = torch::zeros_like(p.tensor, at::MemoryFormat::Preserve);
  }
  s.step += 1;
  s.variance_steps += 1;  // = step until a back-off: v stood still in the 1-bit steps between
  const double bias_correction1 = 1 - std::pow(o.beta1(), double(s.step));
  const double bias_correction2 = 1 - std::pow(o.beta2(), double(s.variance_steps));
  torch::Tensor grad = gradient;
  if (o.weight_decay() != 0) grad = grad.add(p.tensor, o.weight_decay());
  s.exp_avg.mul_(o.beta1()).add_(grad, 1 - o.beta1());
  s.exp_avg_sq.mul_(o.beta2()).addcmul_(grad, grad, 1 - o.beta2());
  const torch::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
  const double step_size = o.lr() / bias_correction1;
  p.tensor.addcdiv_(s.exp_avg, denom, -step_size);
}

void Adam::freeze(std::vector<Param>& /*params*/) {
  // Adam's frozen state is its variance as it stands: nothing to compute.
}

void Adam::local_momentum(Param& p, const torch::Tensor& gradient, torch::Tensor m) {
  const AdamOptions& o = adam_options_of(p.options);
  torch::Tensor grad = gradient;
  if (o.weight_decay() != 0) grad = grad.add(p.tensor, o.weight_decay());
  m.copy_(p.state->exp_avg).mul_(o.beta1()).add_(grad, 1 - o.beta1());
}

void Adam::compressed_update(Param& p, const torch::Tensor& m) {
  const AdamOptions& o = adam_options_of(p.options);
  State& s = *p.state;
  s.step += 1;
  s.exp_avg.copy_(m);
  const double bias_correction1 = 1 - std::pow(o.beta1(), double(s.step));
  const double frozen_correction2 = 1 - std::pow(o.beta2(), double(s.frozen_step));
  const torch::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(frozen_correction2)).add_(o.eps());
  p.tensor.addcdiv_(s.exp_avg, denom, -(o.lr() / bias_correction1));
}

}  // namespace actkit::optim
