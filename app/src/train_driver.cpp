#include "actkit/app/train_driver.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "actkit/app/evaluation.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/measure/memory_floor.h"
#include "actkit/measure/level_memory.h"
#include "actkit/measure/level_switches.h"
#include "actkit/measure/memory_meter.h"
#include "actkit/measure/run_device.h"
#include "actkit/app/lr_schedule.h"
#include "actkit/app/run_progress.h"
#include "actkit/app/train_step.h"
#include "actkit/converters/convert.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/models/zoo.h"
#include "actkit/text/tokenizer.h"

namespace actkit::app {
namespace {

// Mean wall time of the steps after the first (which pays for warm-up).
struct StepTiming {
  double total_ms = 0;
  int64_t steps = 0;
  double mean_ms() const { return steps > 0 ? total_ms / double(steps) : 0; }
};

}  // namespace

DataSet training_data_set(const TrainConfig& c) {
  if (c.data) return *c.data;
  const std::string model = c.init.empty() ? c.model : read_hf_config(c.init).zoo_name;
  return is_language_model(model) ? DataSet::kFortunes : DataSet::kFashionMnist;
}

TrainResult run_training(const TrainConfig& c, const std::function<void(const TrainProgress&)>& on_progress) {
  if (c.epochs < 1 || c.batch < 1) throw InvalidInput("train: epochs and batch must be >= 1");
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw InvalidInput(c10::str("train: --lr: a finite rate > 0, got ", c.lr));
  if (!c.save_hf.empty() && c.init.empty()) {
    throw InvalidInput("train: --save-hf writes a Hugging Face folder: it needs --init with one");
  }
  // A Hugging Face folder names its own model (read before anything is built).
  HfModelInfo hf;
  if (!c.init.empty()) hf = read_hf_config(c.init);
  const std::string model_name = c.init.empty() ? c.model : hf.zoo_name;
  const ModelEntry& entry = find_model(model_name);
  const bool text = entry.task == Task::kLanguageModel;
  if (!text && (entry.task != Task::kClassification || entry.input != InputKind::kImages)) {
    throw InvalidInput(c10::str("train: ", c.init.empty() ? c.model : c.init + " (" + hf.architecture + ")",
                                " takes token ids but is not a language model"));
  }
  if (!c.init.empty() && !text) {
    throw InvalidInput(c10::str("train: --init ", c.init, ": ", hf.architecture,
                                " is an image classifier; train fine-tunes Hugging Face language models"));
  }
  if (!c.init.empty() && c.shape.seq_len > hf.options.max_positions) {
    throw InvalidInput(c10::str("train: --seq-len ", c.shape.seq_len, " is longer than ", c.init, "'s ",
                                hf.options.max_positions, " positions"));
  }
  {
    const ModelOptions options = c.init.empty() ? training_model_options(c.model, c.shape) : hf.options;
    const int64_t length = text ? c.shape.seq_len : options.image_size;
    check_fits_machine(c10::str("train --batch ", c.batch), step_memory_floor(model_name, options, c.batch, length));
  }
  const at::Device device = parse_run_device(c.device, "train");
  apply_level_switches({c.level}, device);  // before anything touches the device
  DataOptions d;
  d.set = training_data_set(c);
  d.text = text;
  d.path = c.data_dir;
  d.seq_len = c.shape.seq_len;
  d.train_limit = c.train_limit;
  d.validation_limit = c.validation_limit;
  d.seed = c.seed;
  if (!c.init.empty()) {
    d.tokenizer = load_tokenizer(c.init);
    d.vocab = hf.options.vocab_size;
    if (d.tokenizer->vocab_size() > hf.options.vocab_size) {
      throw FormatError(c10::str(c.init, ": the tokenizer has ", d.tokenizer->vocab_size(),
                                 " tokens, the model's vocabulary ", hf.options.vocab_size));
    }
  }
  const std::unique_ptr<TrainingData> data = TrainingData::open(d);

  MemoryMeter meter(device);
  at::manual_seed(int64_t(c.seed));
  std::shared_ptr<ZooModel> model =
      c.init.empty() ? make_model(c.model, training_model_options(c.model, c.shape)) : load_hf_model(hf);
  if (!c.resume.empty()) load_state_dict(*model, c.resume);
  model->to(device);
  const ConvertResult converted = convert(*model, c.level, c.seed);
  model->train();
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (text) {
    opt = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(c.lr).weight_decay(0.01));
  } else {
    opt = std::make_unique<torch::optim::SGD>(model->parameters(),
                                              torch::optim::SGDOptions(c.lr).momentum(0.9).weight_decay(5e-4));
  }

  TrainResult r;
  r.level = c.level.spec;
  r.device = device.str();
  r.train_examples = data->epoch_size();
  r.test_examples = data->validation_size();
  const int64_t steps_per_epoch = (r.train_examples + c.batch - 1) / c.batch;
  const int64_t total_steps = steps_per_epoch * c.epochs;
  check_lr_plan(c.lr_plan, total_steps, "train");
  StepTiming timing;
  meter.reset_peak();
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    double loss_sum = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      const int64_t first = s * c.batch;
      const Batch b = data->train_batch(int64_t(epoch) * r.train_examples + first,
                                        std::min(c.batch, r.train_examples - first));
      const at::Tensor x = b.inputs.to(device), y = b.labels.to(device);
      for (auto& group : opt->param_groups()) {
        group.options().set_lr(scheduled_lr(c.lr_plan, c.lr, r.steps, total_steps));
      }
      const auto t0 = std::chrono::steady_clock::now();
      int64_t before = 0;
      StepHooks hooks;
      if (r.steps == 0) {  // the first step's activation memory, measured as ActNN does
        hooks.before_forward = [&] { before = meter.current(); };
        hooks.after_loss = [&](const at::Tensor& out, const at::Tensor& loss) {
          r.activation_bytes = activation_bytes(before, meter.current(), out, loss);
        };
      }
      const at::Tensor loss = train_step(*model, *converted.controller, *opt, x, y, hooks);
      synchronize(device);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r.steps > 0) {
        timing.total_ms += ms;
        ++timing.steps;
      }
      ++r.steps;
      loss_sum += loss.item<double>();
      check_finite_loss(loss.item<double>(), r.steps, 0, c.allow_non_finite);
      if (on_progress) on_progress({epoch, s + 1, steps_per_epoch, loss_sum / double(s + 1)});
    }
    r.final_train_loss = loss_sum / double(steps_per_epoch);
    r.peak_bytes = std::max(r.peak_bytes, meter.peak());  // training only, not evaluation
    (text ? r.final_validation_loss : r.final_test_accuracy) = evaluate(*model, *data, c.batch, device);
    meter.reset_peak();
  }
  r.step_time_ms = timing.mean_ms();
  if (!c.save.empty()) {  // a path the user named: /dev/null stays a device
    const std::vector<char> bytes = state_dict_bytes(*model);
    files::write_output_file(c.save, bytes.data(), bytes.size());
  }
  if (!c.save_hf.empty()) save_hf_folder(*model, hf, c.save_hf, c.save_hf_over_init);
  return r;
}

}  // namespace actkit::app
