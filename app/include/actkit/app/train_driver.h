// Training a zoo model at a level: the driver behind `actkit train`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actkit/app/run_progress.h"
#include "actkit/app/run_spec.h"

namespace actkit::app {

struct TrainConfig {
  // The model (a zoo CNN or language model, or a Hugging Face folder's
  // language model), the data (image classifiers: fashion-mnist or
  // synthetic; language models: fortunes or synthetic tokens), the level
  // (L3 by default), the peak rate (default: SGD with momentum 0.9 at 0.05;
  // language models AdamW at 1e-3), the seed, and the checkpoint:
  // checkpoint.save a checkpoint folder (checkpoint_folder.h; the model,
  // the optimizer, the level's state and the step, also every save_every
  // steps, with DIR/model.pt a copy of the model), checkpoint.resume one
  // to go on from exactly, checkpoint.save_hf a Hugging Face folder.
  RunSpec run = default_run_spec(RunCommand::kTrain);
  int64_t batch = 64;
  std::string device = "cpu";  // or "cuda[:N]": model and batches there, data kept on the host
};

struct TrainProgress {
  int epoch = 0;
  int64_t step = 0;
  int64_t steps_per_epoch = 0;
  double loss = 0;  // running mean over the epoch so far
  std::optional<Evaluation> evaluation;  // when one ran after this step
};

struct TrainResult {
  std::string level;
  double final_test_accuracy = 0;   // image classifiers
  double final_validation_loss = 0; // language models: mean over the validation text
  double final_train_loss = 0;  // mean over the last epoch's steps this call ran (a resume's: those after it)
  double step_time_ms = 0;      // mean training step, warm-up excluded
  std::string device;
  int64_t peak_bytes = 0;       // peak bytes on the device during training steps (evaluation excluded)
  int64_t activation_bytes = 0; // of the first step, measured as ActNN does
  int64_t first_step = 0;       // where a resumed run went on
  int64_t steps = 0;            // run by this call
  std::vector<double> train_losses;  // of each step run
  std::vector<Evaluation> evaluations;  // each epoch's end and every run.eval_every steps, in step order
  int64_t train_examples = 0;
  int64_t test_examples = 0;
};

// Trains on config.device and evaluates on the test split (language
// models: the validation text) after every epoch (the last may be cut
// short by run.steps or a fraction of run.epochs). Epoch e takes the
// examples at positions e·n .. (e + 1)·n - 1 of TrainingData's stream (n
// training examples; the last batch may be short). `on_progress` (may be
// empty) is called after each step. Throws
// actkit::InvalidInput for an unknown model, level, device or data set, a
// missing data directory, or a setting check_run_spec refuses.
TrainResult run_training(const TrainConfig& config, const std::function<void(const TrainProgress&)>& on_progress);

}  // namespace actkit::app
