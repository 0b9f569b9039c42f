// Adam and 1-bit Adam over data-parallel ranks (1-bit LAMB paper §2; the
// 1-bit Adam frame of design §4.8). In the warm-up, and always with
// Exchange::kFp32 / kFp16, each step is LibTorch's torch::optim::Adam on the
// averaged gradient, operation for operation (bias correction, L2 weight
// decay added to the gradient), so the two agree bit for bit. In the
// compression stage of Exchange::kOneBit:
//   g ← grad + wd·x;  m ← β1·m + (1 − β1)·g  (local);  m ← 1-bit average of m
//   x ← x − lr/(1 − β1^t) · m / (√v_f / √(1 − β2^{t_f}) + ε)
// with v_f the variance frozen at step t_f (no layer-wise coefficient).
#pragma once

#include <tuple>

#include "actkit/optim/data_parallel_optimizer.h"

namespace actkit::optim {

struct AdamOptions : public torch::optim::OptimizerCloneableOptions<AdamOptions> {
  AdamOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;
  double get_lr() const override { return lr(); }
  void set_lr(const double v) override { lr(v); }
};

class Adam : public DataParallelOptimizer {
 public:
  // Throws InvalidInput for a learning rate, betas, eps or weight decay out
  // of range, or a negative warm-up.
  Adam(std::vector<torch::optim::OptimizerParamGroup> groups, AdamOptions defaults = {},
       ExchangeOptions exchange = {});
  Adam(std::vector<torch::Tensor> params, AdamOptions defaults = {}, ExchangeOptions exchange = {})
      : Adam({torch::optim::OptimizerParamGroup(std::move(params))}, defaults, exchange) {}

 protected:
  void warmup_update(Param& p, const torch::Tensor& grad) override;
  void local_momentum(Param& p, const torch::Tensor& grad, torch::Tensor m) override;
  void compressed_update(Param& p, const torch::Tensor& m) override;
  void freeze(std::vector<Param>& params) override;
};

}  // namespace actkit::optim
