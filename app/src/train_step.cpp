#include "actkit/app/train_step.h"

#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit::app {

at::Tensor batch_loss(const ZooModel& model, const at::Tensor& inputs, const at::Tensor& output,
                      const at::Tensor& labels) {
  if (model.task() == Task::kLanguageModel) {
    return fused_cross_entropy(output.reshape({-1, output.size(-1)}), labels.reshape({-1}));
  }
  return model.loss(inputs, output, labels);
}

at::Tensor train_step(ZooModel& model, Controller& controller, torch::optim::Optimizer& optimizer,
                      const at::Tensor& inputs, const at::Tensor& labels, const StepHooks& hooks,
                      int64_t micro_batches) {
  const int64_t n = inputs.size(0);
  if (micro_batches < 1 || n % micro_batches != 0) {
    throw InvalidInput(c10::str("train step: ", micro_batches, " micro-batches do not divide a batch of ", n));
  }
  controller.reset_gradients(model.parameters());
  const int64_t slice = n / micro_batches;
  at::Tensor total;
  for (int64_t m = 0; m < micro_batches; ++m) {
    const at::Tensor x = micro_batches == 1 ? inputs : inputs.narrow(0, m * slice, slice);
    const at::Tensor y = micro_batches == 1 ? labels : labels.narrow(0, m * slice, slice);
    if (hooks.before_forward) hooks.before_forward();
    at::Tensor output = model.forward(x);
    at::Tensor loss = batch_loss(model, x, output, y);
    if (hooks.after_loss) hooks.after_loss(output, loss);
    output = at::Tensor();  // what backward does not need goes before it runs
    if (micro_batches == 1) {
      loss.backward();
      total = loss;
    } else {
      (loss / double(micro_batches)).backward();
      total = total.defined() ? total + loss.detach() : loss.detach();
    }
  }
  optimizer.step();
  controller.step();
  return micro_batches == 1 ? total : total / double(micro_batches);
}

}  // namespace actkit::app
