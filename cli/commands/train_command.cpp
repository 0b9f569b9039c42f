// `actkit train`: train a zoo CNN on Fashion-MNIST (or synthetic data) at a
// level, and report accuracy, loss, step time and memory.
#include <fmt/core.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/models/zoo.h"
#include "actkit/optim/local_optimizer.h"
#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "cli_util.h"
#include "progress.h"
#include "run_flags.h"
#include "commands.h"
#include "actkit/measure/level_memory.h"
#include "actkit/app/model_defaults.h"
#include "actkit/measure/run_device.h"
#include "actkit/app/train_driver.h"
#include "actkit/app/training_loop.h"

namespace actkit::cli {
namespace {

struct TrainArgs {
  app::TrainConfig config;
  std::string json_path;
  bool compare = true;
};

void run_train(TrainArgs& a) {
  app::TrainConfig& c = a.config;
  app::RunSpec& run = c.run;
  // Before the banner: a typo gets only the error. A Hugging Face folder
  // names its own model (its config.json is read here, once).
  finish_run_spec(run, app::RunCommand::kTrain);
  optim::parse_local_optimizer(app::optimizer_name(run, app::RunCommand::kTrain));
  const app::ModelSpec& m = run.model;
  const bool text = m.text();
  // Output paths before the run spends its time.
  check_run_outputs(run, app::RunCommand::kTrain);
  if (!a.json_path.empty()) files::check_writable_file(a.json_path);
  parse_run_device(c.device, "train");
  const DataSet set = app::data_set(run);
  fmt::print("training {} on {} at {} for {}, batch {}{}\n", m.describe(), describe_data(set, run.data.path),
             run.level.spec, run.steps > 0 ? fmt::format("{} steps", run.steps) : fmt::format("{} epoch(s)", run.epochs),
             c.batch, c.device == "cpu" ? "" : ", on " + c.device);
  ProgressDisplay progress(false);
  const app::TrainResult r = app::run_training(c, [&](const app::TrainProgress& p) {
    progress.show(fmt::format("epoch {} step", p.epoch + 1), p.step, p.steps_per_epoch, p.loss, "");
    // Each epoch's end too (the last is also the line after the run).
    progress.evaluation(p.evaluation, text ? "validation loss" : "test accuracy");
  });
  if (text) {
    fmt::print("validation loss {:.4f}  train loss {:.4f}  step {:.1f} ms  peak {}\n", r.final_validation_loss,
               r.final_train_loss, r.step_time_ms, mib(r.peak_bytes));
  } else {
    fmt::print("test accuracy {:.2f}%  train loss {:.4f}  step {:.1f} ms  peak {}\n", 100 * r.final_test_accuracy,
               r.final_train_loss, r.step_time_ms, mib(r.peak_bytes));
  }
  if (r.first_step > 0) fmt::print("resumed at step {} from {}\n", r.first_step, run.checkpoint.resume);
  if (!run.checkpoint.save.empty()) fmt::print("checkpoint saved to {} (the model: {}/model.pt)\n", run.checkpoint.save, run.checkpoint.save);
  if (!run.checkpoint.save_hf.empty()) fmt::print("Hugging Face folder written to {}\n", run.checkpoint.save_hf);

  nlohmann::json j{{"model", m.zoo},
                   {"data", to_string(set)},
                   {"level", run.level.spec},
                   {"device", r.device},
                   {"batch", c.batch},
                   {"seed", run.seed},
                   {"train_examples", r.train_examples},
                   {"test_examples", r.test_examples},
                   {"start_step", r.first_step},
                   {"steps", r.steps},
                   {"train_losses", r.train_losses},
                   {"evaluations", app::evaluations_json(r.evaluations, text ? "val_loss" : "test_accuracy")},
                   {"final_test_accuracy", r.final_test_accuracy},
                   {"final_validation_loss", r.final_validation_loss},
                   {"final_train_loss", r.final_train_loss},
                   {"step_time_ms", r.step_time_ms},
                   {"peak_bytes", r.peak_bytes},
                   {"activation_bytes", r.activation_bytes}};
  if (run.steps == 0) j["epochs"] = run.epochs;  // else the run was counted in steps
  // Compared with L0 unless the level is plain fp32 training itself. An L5
  // run on CUDA holds the defrag allocator for the whole process, and L0
  // needs LibTorch's: that comparison takes a process of its own.
  const bool l0_needs_own_process = run.level.defrag_allocator && at::Device(c.device).is_cuda();
  if (a.compare && l0_needs_own_process) {
    fmt::print("L0 comparison skipped (L5 on CUDA): run `actkit memory --model {} --batch {} --image-size 28 "
               "--levels L0 --device {}` for it\n",
               m.zoo, c.batch, c.device);
  } else if (a.compare && (run.level.compresses_anything() || run.level.swap != SwapTarget::kNone)) {
    // One training step of the same model and batch at L0, for the saving.
    LevelMemoryConfig l0_run;
    l0_run.model = m.zoo;
    l0_run.options = m.options();
    l0_run.batch = c.batch;
    l0_run.length = text ? m.shape.seq_len : 28;
    l0_run.levels = {level_preset("L0")};
    l0_run.steps = 1;
    l0_run.seed = run.seed;
    l0_run.device = c.device;
    const int64_t l0 = measure_level_memory(l0_run).front().activation_bytes;
    fmt::print("activation memory per step: {} at {} vs {} at L0 ({:.1f}x less)\n", mib(r.activation_bytes), run.level.spec,
               mib(l0), double(l0) / double(std::max<int64_t>(1, r.activation_bytes)));
    j["l0_activation_bytes"] = l0;
  }
  if (!a.json_path.empty()) {
    write_json(a.json_path, j);
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  app::TrainConfig& c = a->config;
  CLI::App* train =
      app.add_subcommand("train", "Train a zoo CNN on Fashion-MNIST, or a language model on text, at a level");
  add_run_flags(train, &c.run, app::RunCommand::kTrain);
  train->add_option("--batch", c.batch, "Batch size")->check(kPositiveNumber)->capture_default_str();
  train->add_option("--device", c.device, "cpu or cuda[:N]")->capture_default_str();
  add_json_option(train, &a->json_path);
  train->add_flag("!--no-compare", a->compare, "Skip the L0 memory comparison step");
  train->callback([a] { run_train(*a); });
}

}  // namespace actkit::cli
