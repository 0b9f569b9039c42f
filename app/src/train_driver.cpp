#include "actkit/app/train_driver.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>

#include "actkit/converters/convert.h"
#include "actkit/converters/state_dict.h"
#include "actkit/app/text_corpus.h"
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

// Mean wall time of the steps after the first (which pays for warm-up).
struct StepTiming {
  double total_ms = 0;
  int64_t steps = 0;
  double mean_ms() const { return steps > 0 ? total_ms / double(steps) : 0; }
};

// One training step, the same for every model: the level's gradient
// policy, forward, `loss_of(output)`, backward, the optimizer and the
// controller. The first step's activation memory goes into r. Returns the
// loss.
double timed_step(ZooModel& model, const ConvertResult& converted, torch::optim::Optimizer& opt, MemoryMeter& meter,
                  at::Device device, const at::Tensor& x, const std::function<at::Tensor(const at::Tensor&)>& loss_of,
                  TrainResult& r, StepTiming& timing) {
  const auto t0 = std::chrono::steady_clock::now();
  converted.controller->reset_gradients(model.parameters());
  const int64_t before = r.steps == 0 ? meter.current() : 0;
  at::Tensor out = model.forward(x);
  at::Tensor loss = loss_of(out);
  if (r.steps == 0) r.activation_bytes = activation_bytes(before, meter.current(), out, loss);
  out = at::Tensor();
  loss.backward();
  opt.step();
  converted.controller->step();
  synchronize(device);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (r.steps > 0) {
    timing.total_ms += ms;
    ++timing.steps;
  }
  ++r.steps;
  return loss.item<double>();
}

// Random bytes with a learnable rule (each byte is the previous plus one,
// at random restarts), for runs without the corpus.
std::pair<at::Tensor, at::Tensor> synthetic_text(int64_t n, int64_t t, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor start = at::randint(0, 256, {n, 1}, gen, at::kLong);
  const at::Tensor seq = (start + at::arange(t + 1, at::kLong)).remainder(256);
  return {seq.narrow(1, 0, t).contiguous(), seq.narrow(1, 1, t).contiguous()};
}

double validation_loss(ZooModel& model, const TextCorpus* corpus, int64_t batch, int64_t seq_len, uint64_t seed,
                       at::Device device) {
  torch::NoGradGuard no_grad;
  model.eval();
  // Up to 32 batches: the validation text of the fortunes corpus at the
  // default length is about 600 examples.
  const int64_t n = corpus != nullptr ? std::min<int64_t>(corpus->validation_size(), 32 * batch) : 4 * batch;
  double sum = 0;
  int64_t batches = 0;
  for (int64_t i = 0; i + batch <= n || (batches == 0 && i < n); i += batch) {
    const int64_t b = std::min(batch, n - i);
    at::Tensor x, y;
    if (corpus != nullptr) {
      std::vector<int64_t> ids;
      for (int64_t j = 0; j < b; ++j) ids.push_back(corpus->validation_id(i + j));
      std::tie(x, y) = corpus->examples(ids);
    } else {
      std::tie(x, y) = synthetic_text(b, seq_len, ~seed - uint64_t(i));
    }
    const at::Tensor logits = model.forward(x.to(device));
    sum += fused_cross_entropy(logits.reshape({-1, logits.size(-1)}), y.to(device).reshape({-1})).item<double>();
    ++batches;
  }
  model.train();
  return sum / double(std::max<int64_t>(1, batches));
}

TrainResult run_language_training(const TrainConfig& c, const std::function<void(const TrainProgress&)>& on_progress) {
  const at::Device device = parse_run_device(c.device, "train");
  apply_level_switches({c.level}, device);
  std::unique_ptr<TextCorpus> corpus;
  if (c.data == "fortunes") {
    corpus = std::make_unique<TextCorpus>(c.data_dir.empty() ? kFortunesDir : c.data_dir, c.seq_len, c.train_limit);
  } else if (c.data != "synthetic") {
    throw InvalidInput(c10::str("train: ", c.model, " learns text: --data fortunes or synthetic, not '", c.data, "'"));
  }
  MemoryMeter meter(device);
  at::manual_seed(int64_t(c.seed));
  ModelOptions o;
  o.vocab_size = 256;
  o.layers = c.layers;
  o.hidden = c.hidden;
  o.heads = c.heads;
  o.dropout = c.dropout;
  o.max_positions = std::max<int64_t>(1024, c.seq_len);
  auto model = make_model(c.model, o);
  if (!c.resume.empty()) load_state_dict(*model, c.resume);
  model->to(device);
  const ConvertResult converted = convert(*model, c.level, c.seed);
  model->train();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(c.lr).weight_decay(0.01));

  TrainResult r;
  r.level = c.level.spec;
  r.device = device.str();
  r.train_examples = corpus ? corpus->train_size() : (c.train_limit > 0 ? c.train_limit : 4096);
  r.test_examples = corpus ? corpus->validation_size() : 4 * c.batch;
  const int64_t steps_per_epoch = (r.train_examples + c.batch - 1) / c.batch;
  const int64_t total_steps = steps_per_epoch * c.epochs;
  StepTiming timing;
  meter.reset_peak();
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    double loss_sum = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      at::Tensor x, y;
      const int64_t first = (int64_t(epoch) * steps_per_epoch + s) * c.batch;
      if (corpus) {
        std::vector<int64_t> ids;
        for (int64_t j = 0; j < c.batch; ++j) ids.push_back(corpus->train_id_at(first + j, c.seed));
        std::tie(x, y) = corpus->examples(ids);
      } else {
        std::tie(x, y) = synthetic_text(c.batch, c.seq_len, c.seed * 1000003u + uint64_t(first));
      }
      x = x.to(device);
      y = y.to(device);
      for (auto& group : opt.param_groups()) {
        group.options().set_lr(c.lr * 0.5 * (1 + std::cos(M_PI * double(r.steps) / double(total_steps))));
      }
      loss_sum += timed_step(*model, converted, opt, meter, device, x,
                             [&](const at::Tensor& out) {
                               return fused_cross_entropy(out.reshape({-1, out.size(-1)}), y.reshape({-1}));
                             },
                             r, timing);
      if (on_progress) on_progress({epoch, s + 1, steps_per_epoch, loss_sum / double(s + 1)});
    }
    r.final_train_loss = loss_sum / double(steps_per_epoch);
    r.peak_bytes = std::max(r.peak_bytes, meter.peak());
    r.final_validation_loss = validation_loss(*model, corpus.get(), c.batch, c.seq_len, c.seed, device);
    meter.reset_peak();
  }
  r.step_time_ms = timing.mean_ms();
  if (!c.save.empty()) save_state_dict(*model, c.save);
  return r;
}

}  // namespace

TrainResult run_training(const TrainConfig& c, const std::function<void(const TrainProgress&)>& on_progress) {
  if (c.epochs < 1 || c.batch < 1) throw InvalidInput("train: epochs and batch must be >= 1");
  if (!(c.lr > 0)) throw InvalidInput("train: the learning rate must be > 0");
  if (find_model(c.model).task == Task::kLanguageModel) return run_language_training(c, on_progress);
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
    throw InvalidInput(c10::str("train: ", c.model, " takes token ids but is not a language model"));
  }
  auto model = make_model(c.model, o);
  if (!c.resume.empty()) load_state_dict(*model, c.resume);
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
  StepTiming timing;
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
      loss_sum += timed_step(*model, converted, opt, meter, device, x,
                             [&](const at::Tensor& out) { return model->loss(x, out, y); }, r, timing);
      if (on_progress) on_progress({epoch, s + 1, steps_per_epoch, loss_sum / double(s + 1)});
    }
    r.final_train_loss = loss_sum / double(steps_per_epoch);
    r.peak_bytes = std::max(r.peak_bytes, meter.peak());  // training only, not evaluation
    r.final_test_accuracy = accuracy(*model, test, device);
    meter.reset_peak();
  }
  r.step_time_ms = timing.mean_ms();
  if (!c.save.empty()) save_state_dict(*model, c.save);
  return r;
}

}  // namespace actkit::app
