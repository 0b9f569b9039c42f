#include "actkit/app/train_driver.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <chrono>
#include <cmath>

#include "actkit/converters/convert.h"
#include "actkit/models/zoo.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/app/fashion_mnist.h"
#include "actkit/app/level_memory.h"
#include "actkit/app/level_switches.h"
#include "actkit/app/memory_meter.h"
#include "actkit/app/run_device.h"
#include "actkit/app/training_setup.h"

namespace actkit::app {
namespace {

double accuracy(ZooModel& model, const ImageDataset& test, at::Device device) {
  torch::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  constexpr int64_t kEvalBatch = 500;
  for (int64_t i = 0; i < test.images.size(0); i += kEvalBatch) {
    const int64_t n = std::min(kEvalBatch, test.images.size(0) - i);
    const at::Tensor logits = model.forward(test.images.narrow(0, i, n).to(device));
    correct += logits.argmax(1).cpu().eq(test.labels.narrow(0, i, n)).sum().item<int64_t>();
  }
  model.train();
  return double(correct) / double(test.images.size(0));
}

}  // namespace

TrainResult run_training(const TrainConfig& c, const std::function<void(const TrainProgress&)>& on_progress) {
  if (c.epochs < 1 || c.batch < 1) throw InvalidInput("train: epochs and batch must be >= 1");
  if (!(c.lr > 0)) throw InvalidInput("train: the learning rate must be > 0");
  const LevelConfig& level = c.level;
  const at::Device device = parse_run_device(c.device, "train");
  apply_level_switches({level}, device);  // before anything touches the device
  ImageDataset train, test;
  if (c.data == "fashion-mnist") {
    const std::string dir = c.data_dir.empty() ? kFashionMnistDir : c.data_dir;
    train = load_fashion_mnist(dir, "train", c.train_limit);
    test = load_fashion_mnist(dir, "t10k");
  } else if (c.data == "synthetic") {
    const int64_t n = c.train_limit > 0 ? c.train_limit : 4096;
    // One draw for both splits, so they share the labelling function.
    ImageDataset all = synthetic_images(n + 1024, 10, 1, 28, c.seed);
    train = {all.images.narrow(0, 0, n), all.labels.narrow(0, 0, n)};
    test = {all.images.narrow(0, n, 1024), all.labels.narrow(0, n, 1024)};
  } else {
    throw InvalidInput(c10::str("train: unknown data '", c.data, "' (fashion-mnist or synthetic)"));
  }

  MemoryMeter meter(device);
  at::manual_seed(int64_t(c.seed));
  ModelOptions o;
  o.num_classes = 10;
  o.in_channels = 1;
  o.image_size = 28;
  o.patch_size = 4;
  const ModelEntry& entry = find_model(c.model);
  if (entry.task != Task::kClassification || entry.input != InputKind::kImages) {
    throw InvalidInput(c10::str("train: ", c.model, " is not an image classifier"));
  }
  auto model = make_model(c.model, o);
  model->to(device);
  const ConvertResult converted = convert(*model, level, c.seed);
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(c.lr).momentum(0.9).weight_decay(5e-4));

  TrainResult r;
  r.level = c.level.spec;
  r.device = device.str();
  r.train_examples = train.images.size(0);
  r.test_examples = test.images.size(0);
  const int64_t steps_per_epoch = (r.train_examples + c.batch - 1) / c.batch;
  const int64_t total_steps = steps_per_epoch * c.epochs;
  auto& sgd_options = static_cast<torch::optim::SGDOptions&>(opt.param_groups()[0].options());
  double timed_ms = 0;
  int64_t timed_steps = 0;
  meter.reset_peak();
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    const at::Tensor order = at::randperm(r.train_examples, at::kLong);
    double loss_sum = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      const int64_t begin = s * c.batch;
      const at::Tensor idx = order.narrow(0, begin, std::min(c.batch, r.train_examples - begin));
      const at::Tensor x = train.images.index_select(0, idx).to(device);
      const at::Tensor y = train.labels.index_select(0, idx).to(device);
      // Cosine decay to zero: the final model, and so the reported accuracy,
      // does not hinge on the noise of the last few steps.
      sgd_options.lr(c.lr * 0.5 * (1 + std::cos(M_PI * double(r.steps) / double(total_steps))));
      const auto t0 = std::chrono::steady_clock::now();
      converted.controller->reset_gradients(model->parameters());
      const int64_t before = r.steps == 0 ? meter.current() : 0;
      at::Tensor out = model->forward(x);
      at::Tensor loss = model->loss(x, out, y);
      if (r.steps == 0) r.activation_bytes = activation_bytes(before, meter.current(), out, loss);
      out = at::Tensor();
      loss.backward();
      opt.step();
      converted.controller->step();
      synchronize(device);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r.steps > 0) {
        timed_ms += ms;
        ++timed_steps;
      }
      ++r.steps;
      loss_sum += loss.item<double>();
      if (on_progress) on_progress({epoch, s + 1, steps_per_epoch, loss_sum / double(s + 1)});
    }
    r.final_train_loss = loss_sum / double(steps_per_epoch);
    r.peak_bytes = std::max(r.peak_bytes, meter.peak());  // training only, not evaluation
    r.final_test_accuracy = accuracy(*model, test, device);
    meter.reset_peak();
  }
  r.step_time_ms = timed_steps > 0 ? timed_ms / double(timed_steps) : 0;
  return r;
}

}  // namespace actkit::app
