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
#include "actkit/app/training_loop.h"
#include "actkit/converters/convert.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/models/zoo.h"
#include "actkit/optim/local_optimizer.h"
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

TrainResult run_training(const TrainConfig& config, const std::function<void(const TrainProgress&)>& on_progress) {
  if (config.batch < 1) throw InvalidInput("train: --batch must be >= 1");
  // A Hugging Face folder names its own model (read once, before anything is built).
  RunSpec run = config.run;
  resolve_model(run.model, "train");
  check_run_spec(run, "train");
  const ModelSpec& m = run.model;
  const ModelEntry& entry = find_model(m.zoo);
  const bool text = entry.task == Task::kLanguageModel;
  if (!text && (entry.task != Task::kClassification || entry.input != InputKind::kImages)) {
    throw InvalidInput(c10::str("train: ", m.describe(), " takes token ids but is not a language model"));
  }
  const ModelOptions options = m.options();
  {
    const int64_t length = text ? m.shape.seq_len : options.image_size;
    check_fits_machine(c10::str("train --batch ", config.batch), step_memory_floor(m.zoo, options, config.batch, length));
  }
  const at::Device device = parse_run_device(config.device, "train");
  apply_level_switches({run.level}, device);  // before anything touches the device
  const DataOptions d = data_options(run);
  const std::unique_ptr<TrainingData> data = TrainingData::open(d);

  MemoryMeter meter(device);
  at::manual_seed(int64_t(run.seed));
  std::shared_ptr<ZooModel> model = open_model(m);
  if (!run.checkpoint.resume.empty()) load_state_dict(*model, run.checkpoint.resume);
  model->to(device);
  const ConvertResult converted = convert(*model, run.level, run.seed);
  model->train();
  // AdamW for language models, SGD with momentum for the image classifiers.
  const double lr = peak_lr(run, RunCommand::kTrain), decay = weight_decay(run, RunCommand::kTrain);
  const std::unique_ptr<torch::optim::Optimizer> opt = optim::make_local_optimizer(
      text ? optim::LocalOptimizer::kAdamW : optim::LocalOptimizer::kSgd, model->parameters(), lr, decay);

  TrainResult r;
  r.level = run.level.spec;
  r.device = device.str();
  r.train_examples = data->epoch_size();
  r.test_examples = data->validation_size();
  const int64_t steps_per_epoch = (r.train_examples + config.batch - 1) / config.batch;
  const int64_t total_steps = run_steps(run, double(steps_per_epoch));
  check_lr_plan(run.lr_plan, total_steps, "train");
  StepTiming timing;
  meter.reset_peak();
  // Whole epochs, the last one cut short where the run's steps end; each
  // ends with an evaluation.
  auto epoch_of = [&](int64_t step) { return step / steps_per_epoch; };
  auto steps_in_epoch = [&](int64_t epoch) { return std::min(steps_per_epoch, total_steps - epoch * steps_per_epoch); };
  double loss_sum = 0;
  TrainingLoop loop;
  loop.steps = total_steps;
  loop.allow_non_finite = run.allow_non_finite;
  loop.step = [&](int64_t step) {
    const int64_t epoch = epoch_of(step), first = (step - epoch * steps_per_epoch) * config.batch;
    const Batch b = data->train_batch(epoch * r.train_examples + first, std::min(config.batch, r.train_examples - first));
    const at::Tensor x = b.inputs.to(device), y = b.labels.to(device);
    for (auto& group : opt->param_groups()) group.options().set_lr(scheduled_lr(run.lr_plan, lr, step, total_steps));
    const auto t0 = std::chrono::steady_clock::now();
    int64_t before = 0;
    StepHooks hooks;
    if (step == 0) {  // the first step's activation memory, measured as ActNN does
      hooks.before_forward = [&] { before = meter.current(); };
      hooks.after_loss = [&](const at::Tensor& out, const at::Tensor& loss) {
        r.activation_bytes = activation_bytes(before, meter.current(), out, loss);
      };
    }
    const at::Tensor loss = train_step(*model, *converted.controller, *opt, x, y, hooks);
    synchronize(device);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) {
      timing.total_ms += ms;
      ++timing.steps;
    }
    ++r.steps;
    if (step == epoch * steps_per_epoch) loss_sum = 0;
    loss_sum += loss.item<double>();
    return LoopStep{loss.item<double>(), ms / 1000, double(b.example_ids.size()), text, false};
  };
  loop.on_step = [&](const StepProgress& p) {
    const int64_t epoch = epoch_of(p.step - 1), within = p.step - epoch * steps_per_epoch;
    const int64_t epoch_steps = steps_in_epoch(epoch);
    if (on_progress) on_progress({int(epoch), within, epoch_steps, loss_sum / double(within)});
    if (within < epoch_steps) return;
    r.final_train_loss = loss_sum / double(epoch_steps);
    r.peak_bytes = std::max(r.peak_bytes, meter.peak());  // training only, not evaluation
    (text ? r.final_validation_loss : r.final_test_accuracy) = evaluate(*model, *data, config.batch, device);
    meter.reset_peak();
  };
  run_training_loop(loop);
  r.step_time_ms = timing.mean_ms();
  if (!run.checkpoint.save.empty()) {  // a path the user named: /dev/null stays a device
    const std::vector<char> bytes = state_dict_bytes(*model);
    files::write_output_file(run.checkpoint.save, bytes.data(), bytes.size());
  }
  if (!run.checkpoint.save_hf.empty()) {
    save_hf_folder(*model, *m.hf, run.checkpoint.save_hf, run.checkpoint.save_hf_over_init);
  }
  return r;
}

}  // namespace actkit::app
