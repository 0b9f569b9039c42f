// LAMB and 1-bit LAMB over data-parallel ranks (1-bit LAMB paper, eq. (2)
// and Algorithm 1).
//
// LAMB, per parameter tensor (each its own layer-wise coefficient):
//   m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²
//   u ← m / (√v + ε) + wd·x
//   c ← clip(‖x‖ / ‖u‖, c_min, c_max)  (1 when either norm is 0)
//   x ← x − lr·c·u
// and, when c was measured (both norms > 0; DeepSpeed's rule),
// c_avg ← β3·c_avg + (1 − β3)·c, the moving average the compression stage
// starts from. No bias correction of m and v, as in eq. (2).
//
// 1-bit LAMB, after the warm-up (Algorithm 1, lines 4–23): at the freeze,
// v_f ← v (frozen), the fresh variance starts from v, and each tensor's
// momentum scale coefficient s ← mean_l(‖m_l‖/√n_l) / (‖m‖/√n) is fixed
// (§4.3; 1 for a zero momentum). Then each step:
//   m_prev ← m;  m ← β1·m + (1 − β1)·g  (local)
//   m ← (1-bit average of s·m) / s
//   ĝ ← (m − β1·m_prev)/(1 − β1);  v_fresh ← β2·v_fresh + (1 − β2)·ĝ²
//   r ← max((√v_f + ε) / (√v_fresh + ε)) clipped to [(1 − r_thr)·r_prev,
//        (1 + r_thr)·r_prev], then to [r_min, r_max] (the previous r if not
//        finite). Line 17 of Algorithm 1 prints the ratio of the variances;
//        this is the ratio of the update's denominators, as the authors'
//        DeepSpeed code computes it (docs/data-parallel.md: why, measured).
//   c ← r·ĉ;  x ← x − lr·c·(m / (√v_f + ε) + wd·x)
// with ĉ = c_avg / (1 − β3^k) over the k coefficients averaged (1 if none):
// at the paper's warm-ups of thousands of steps ĉ = c_avg; at a short one
// c_avg alone would hold 1 − β3^k of the coefficients' level. Elements
// whose gradient was 0 at every warm-up step keep a zero momentum (the
// base class's mask).
#pragma once

#include "actkit/optim/data_parallel_optimizer.h"

namespace actkit::optim {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, c_min) = 0.01;  // the paper's BERT settings
  TORCH_ARG(double, c_max) = 0.3;
  double get_lr() const override { return lr(); }
  void set_lr(const double v) override { lr(v); }
};

// The compression stage's coefficients (Algorithm 1's defaults).
struct OneBitLambOptions {
  double beta3 = 0.9;
  double r_min = 0.5, r_max = 4.0, r_threshold = 0.1;
};

class Lamb : public DataParallelOptimizer {
 public:
  // Throws InvalidInput for settings out of range.
  Lamb(std::vector<torch::optim::OptimizerParamGroup> groups, LambOptions defaults = {}, ExchangeOptions exchange = {},
       OneBitLambOptions onebit = {});
  Lamb(std::vector<torch::Tensor> params, LambOptions defaults = {}, ExchangeOptions exchange = {},
       OneBitLambOptions onebit = {})
      : Lamb({torch::optim::OptimizerParamGroup(std::move(params))}, defaults, exchange, onebit) {}

  // The coefficient c of each parameter's last update, in group order (for
  // reports and tests).
  std::vector<double> coefficients() const;

 protected:
  void warmup_update(Param& p, const torch::Tensor& grad) override;
  void local_momentum(Param& p, const torch::Tensor& grad, torch::Tensor m) override;
  void compressed_update(Param& p, const torch::Tensor& m) override;
  void freeze(std::vector<Param>& params) override;

 private:
  // ĉ of the compression stage (see above).
  double frozen_coefficient(const State& s) const;
  OneBitLambOptions onebit_;
};

}  // namespace actkit::optim
