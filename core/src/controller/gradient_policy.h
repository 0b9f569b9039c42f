// The controller's gradient policy: what it learns from gradients and
// what it does with them.
//
//   * Per layer, a moving average of the per-sample squared norm of the
//     output gradient, E||grad||^2: the gradient factor of a layer's
//     sensitivity in the per-layer bit re-allocation (ActNN Sec. 4.3).
//     Backward records norms as device tensors; they are read back together,
//     in one copy, at the next step.
//   * Whether parameter gradients are kept between steps (the level's
//     `grads` switch; core/gradients.h): under `auto`, keep while the last
//     step saved at least as many compressed bytes as the gradients take.
//
// Not thread-safe: the Controller serialises every call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "actkit/core/level.h"

namespace actkit::detail {

class GradientPolicy {
 public:
  void add_layer();

  // Keeps `norm` (0-dim float, ||grad_output|| over `samples` samples, on
  // the gradient's device) of a valid `layer` for fold_norms(). Folds early
  // when many are waiting (no step() calls: evaluation, a memory probe).
  void record_norm(int layer, int64_t samples, at::Tensor norm);

  // Folds the recorded norms into the layers' moving averages, in recording
  // order, with one device-to-host copy. Non-finite norms are skipped.
  void fold_norms();

  // Per layer, E||grad||^2 per sample; 1 for a layer without gradients yet.
  std::vector<double> gradient_factors() const;

  // Ends an iteration whose saves brought the payload total to
  // `compressed_bytes` (stats' running count).
  void end_step(int64_t compressed_bytes);

  // What Controller::reset_gradients does for `config` when the gradients
  // take `gradient_bytes` (only read under `auto`) and `iterations` steps
  // have completed.
  struct Decision {
    bool keep;     // keep (zero in place) rather than drop
    bool regroup;  // kept from now on but dropped before: move them into one buffer first
  };
  Decision decide(const LevelConfig& config, int64_t iterations, int64_t gradient_bytes);

  // What carries over between iterations: each layer's moving average (and
  // whether it has one yet), the payload counts end_step() keeps, the last
  // decision.
  struct State {
    std::vector<std::pair<double, bool>> layers;  // mean_sq, seen
    int64_t compressed_at_step_start = 0;
    int64_t last_step_compressed = 0;
    bool kept = false;
  };
  // Between iterations only: throws InvalidInput while norms wait for
  // fold_norms().
  State state() const;
  // Replaces the state with one state() returned for as many layers;
  // throws InvalidInput for another count.
  void restore(const State& state);

 private:
  struct Norm {
    int layer;
    int64_t samples;
    at::Tensor norm;
  };
  struct LayerGradient {
    double mean_sq = 1;  // moving average of per-sample ||grad_output||^2
    bool seen = false;
  };

  std::vector<LayerGradient> layers_;
  std::vector<Norm> pending_;
  int64_t compressed_at_step_start_ = 0;  // payload total when the iteration began
  int64_t last_step_compressed_ = 0;      // payload bytes the last completed iteration saved
  bool kept_ = false;                     // what the last decide() chose
};

}  // namespace actkit::detail
