#include "actkit/app/train_driver.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "actkit/app/checkpoint_folder.h"
#include "actkit/app/evaluation.h"
#include "actkit/app/worker_checkpoint.h"
#include "actkit/converters/run_settings.h"
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
  // A Hugging Face folder names its own model (read once, before anything is
  // built); another --init is a state dict or a --save folder to start from.
  RunSpec run = config.run;
  resolve_model(run.model, "train", /*checkpoint_init=*/true);
  check_run_spec(run, "train");
  const optim::LocalOptimizer optimizer = optim::parse_local_optimizer(optimizer_name(run, RunCommand::kTrain));
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
  // The last checkpoint committed in a --save folder, never a half save;
  // never one another run is writing.
  const CheckpointSpec& ckpt = run.checkpoint;
  if (!ckpt.resume.empty()) files::FolderLock::check_free(ckpt.resume);
  const std::string resume_from = ckpt.resume.empty() ? "" : committed_folder(ckpt.resume);
  if (!resume_from.empty()) {
    load_state_dict(*model, resume_from + "/model.pt");
  } else if (!m.hf && !m.init.empty()) {  // weights to start from, with this run's own settings
    load_state_dict(*model, files::is_directory(m.init) ? committed_folder(m.init) + "/model.pt" : m.init);
  }
  model->to(device);
  const ConvertResult converted = convert(*model, run.level, run.seed);
  model->train();
  // AdamW for language models, SGD with momentum for the image classifiers (by default).
  const double lr = peak_lr(run, RunCommand::kTrain), decay = weight_decay(run, RunCommand::kTrain);
  const std::unique_ptr<torch::optim::Optimizer> opt = optim::make_local_optimizer(
      optimizer, model->parameters(), lr, decay);

  TrainResult r;
  r.level = run.level.spec;
  r.device = device.str();
  r.train_examples = data->epoch_size();
  r.test_examples = data->validation_size();
  const int64_t steps_per_epoch = (r.train_examples + config.batch - 1) / config.batch;
  const int64_t total_steps = run_steps(run, double(steps_per_epoch));
  check_lr_plan(run.lr_plan, total_steps, "train");

  // What a checkpoint records and a resumed run must share: everything but
  // the length of the run and the device.
  RunSettings facts{{"model", m.describe()},
                    {"level", run.level.spec},
                    {"data", to_string(d.set)},
                    {"examples", std::to_string(r.train_examples)},
                    {"batch", std::to_string(config.batch)},
                    {"optimizer", optimizer_name(run, RunCommand::kTrain)},
                    {"lr", c10::str(lr, " ", describe(run.lr_plan))},
                    {"weight decay", c10::str(decay)},
                    {"seed", std::to_string(run.seed)}};
  for (auto& item : model_data_settings(run)) facts.push_back(std::move(item));
  const std::string settings = run_settings_text(facts, {});
  const WorkerCheckpoint checkpoint("train", 0, 1, settings);
  if (!resume_from.empty()) {
    const WorkerCheckpoint::Loaded loaded = checkpoint.load(resume_from, *opt, *converted.controller);
    if (!loaded.steps_done) {
      throw FormatError(c10::str("train: ", loaded.file, " records no step count: it is not a train checkpoint"));
    }
    r.first_step = *loaded.steps_done;
    if (r.first_step >= total_steps) {
      throw InvalidInput(c10::str("train: the checkpoint is of step ", r.first_step, ", the run has ", total_steps,
                                  " steps: nothing to do"));
    }
  }
  // One run per --save folder: a second would interleave its files with ours.
  std::unique_ptr<files::FolderLock> save_lock;
  if (!ckpt.save.empty()) {
    save_lock = std::make_unique<files::FolderLock>(ckpt.save);
    claim_checkpoint_folder(ckpt.save, "train: --save");
  }
  auto save_checkpoint = [&](int64_t steps_done) {
    checkpoint.save(begin_step_folder(ckpt.save, steps_done), steps_done, *opt, *converted.controller, *model);
    commit_checkpoint(ckpt.save, steps_done);
  };
  StepTiming timing;
  meter.reset_peak();
  // Whole epochs, the last one cut short where the run's steps end; each
  // ends with an evaluation.
  auto epoch_of = [&](int64_t step) { return step / steps_per_epoch; };
  auto steps_in_epoch = [&](int64_t epoch) { return std::min(steps_per_epoch, total_steps - epoch * steps_per_epoch); };
  double loss_sum = 0;
  int64_t loss_steps = 0;  // of this epoch, run by this process
  TrainingLoop loop;
  loop.first_step = r.first_step;
  loop.steps = total_steps;
  loop.allow_non_finite = run.allow_non_finite;
  loop.save_every = ckpt.save_every;
  if (!ckpt.save.empty()) loop.save = save_checkpoint;
  loop.step = [&](int64_t step) {
    seed_step(run.seed, step, 0);
    const int64_t epoch = epoch_of(step), first = (step - epoch * steps_per_epoch) * config.batch;
    const Batch b = data->train_batch(epoch * r.train_examples + first, std::min(config.batch, r.train_examples - first));
    const at::Tensor x = b.inputs.to(device), y = b.labels.to(device);
    for (auto& group : opt->param_groups()) group.options().set_lr(scheduled_lr(run.lr_plan, lr, step, total_steps));
    const auto t0 = std::chrono::steady_clock::now();
    int64_t before = 0;
    StepHooks hooks;
    if (step == r.first_step) {  // the first step's activation memory, measured as ActNN does
      hooks.before_forward = [&] { before = meter.current(); };
      hooks.after_loss = [&](const at::Tensor& out, const at::Tensor& loss) {
        r.activation_bytes = activation_bytes(before, meter.current(), out, loss);
      };
    }
    const at::Tensor loss = train_step(*model, *converted.controller, *opt, x, y, hooks);
    synchronize(device);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (step > r.first_step) {
      timing.total_ms += ms;
      ++timing.steps;
    }
    ++r.steps;
    if (step == epoch * steps_per_epoch || step == r.first_step) loss_sum = 0, loss_steps = 0;
    r.train_losses.push_back(loss.item<double>());
    loss_sum += r.train_losses.back();
    ++loss_steps;
    return LoopStep{r.train_losses.back(), ms / 1000, double(b.example_ids.size()), text, false};
  };
  // Each epoch's end (the run's last step included), and every
  // --eval-every steps.
  loop.evaluate_every = run.eval_every;
  loop.evaluate_also = [&](int64_t done) { return done % steps_per_epoch == 0 || done == total_steps; };
  loop.evaluate = [&](int64_t) {
    r.peak_bytes = std::max(r.peak_bytes, meter.peak());  // training only, not evaluation
    const double value = evaluate(*model, *data, config.batch, device);
    meter.reset_peak();
    return value;
  };
  loop.on_step = [&](const StepProgress& p) {
    const int64_t epoch = epoch_of(p.step - 1), within = p.step - epoch * steps_per_epoch;
    const int64_t epoch_steps = steps_in_epoch(epoch);
    if (on_progress) on_progress({int(epoch), within, epoch_steps, loss_sum / double(loss_steps), p.evaluation});
    if (within < epoch_steps) return;
    r.final_train_loss = loss_sum / double(loss_steps);
    (text ? r.final_validation_loss : r.final_test_accuracy) = p.evaluation->value;
  };
  r.evaluations = run_training_loop(loop).evaluations;
  r.step_time_ms = timing.mean_ms();
  if (!ckpt.save.empty()) {
    save_checkpoint(total_steps);
    save_state_dict(*model, ckpt.save + "/model.pt");  // a copy where users look for the model, as dp's
  }
  if (!ckpt.save_hf.empty()) save_hf_folder(*model, *m.hf, ckpt.save_hf, ckpt.save_hf_over_init);
  return r;
}

}  // namespace actkit::app
