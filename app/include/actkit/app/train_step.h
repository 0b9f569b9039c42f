// One training step of a zoo model at a level, the same for `actkit train`
// and every worker of `actkit dp`.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <functional>

#include "actkit/core/controller.h"
#include "actkit/models/zoo.h"

namespace actkit::app {

// The loss the training commands minimize and report: cross entropy of
// `output` against `labels` (language models: the next token at every
// position, as TrainingData's labels hold them).
at::Tensor batch_loss(const ZooModel& model, const at::Tensor& inputs, const at::Tensor& output,
                      const at::Tensor& labels);

// Where a caller looks in on a step (either may be empty): just before the
// forward, and once the loss exists while the output is still alive (train
// measures the activation memory there).
struct StepHooks {
  std::function<void()> before_forward;
  std::function<void(const at::Tensor& output, const at::Tensor& loss)> after_loss;
};

// The level's gradient policy (controller.reset_gradients in place of
// zero_grad(): at levels that keep gradients they are views into one
// buffer, which zero_grad() cannot detach), the forward, batch_loss, the
// backward (the output freed first), the optimizer's step and the
// controller's. With micro_batches = k > 1 (gradient accumulation) the
// batch (dim 0, a multiple of k) is cut into k equal slices, each slice's
// forward and backward run in turn with its loss divided by k, then the
// optimizer steps once; the hooks run for every slice. The gradients are
// then the mean of the slices' gradients: the whole batch's for models
// whose examples do not interact (batch norm normalizes each slice by its
// own statistics, and updates its running ones k times). Returns the
// (mean) loss, a scalar tensor.
// Throws InvalidInput when k < 1 or does not divide the batch.
at::Tensor train_step(ZooModel& model, Controller& controller, torch::optim::Optimizer& optimizer,
                      const at::Tensor& inputs, const at::Tensor& labels, const StepHooks& hooks = {},
                      int64_t micro_batches = 1);

}  // namespace actkit::app
