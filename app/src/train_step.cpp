#include "actkit/app/train_step.h"

namespace actkit::app {

at::Tensor batch_loss(const ZooModel& model, const at::Tensor& inputs, const at::Tensor& output,
                      const at::Tensor& labels) {
  if (model.task() == Task::kLanguageModel) {
    return fused_cross_entropy(output.reshape({-1, output.size(-1)}), labels.reshape({-1}));
  }
  return model.loss(inputs, output, labels);
}

at::Tensor train_step(ZooModel& model, Controller& controller, torch::optim::Optimizer& optimizer,
                      const at::Tensor& inputs, const at::Tensor& labels, const StepHooks& hooks) {
  controller.reset_gradients(model.parameters());
  if (hooks.before_forward) hooks.before_forward();
  at::Tensor output = model.forward(inputs);
  at::Tensor loss = batch_loss(model, inputs, output, labels);
  if (hooks.after_loss) hooks.after_loss(output, loss);
  output = at::Tensor();  // what backward does not need goes before it runs
  loss.backward();
  optimizer.step();
  controller.step();
  return loss;
}

}  // namespace actkit::app
