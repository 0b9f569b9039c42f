// Training a zoo model at a level: the driver behind `actkit train`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "actkit/app/lr_schedule.h"
#include "actkit/app/model_defaults.h"
#include "actkit/data/training_data.h"
#include "actkit/core/level.h"

namespace actkit::app {

struct TrainConfig {
  std::string model = "resnet18";
  // Image classifiers: fashion-mnist or synthetic. Language models:
  // fortunes (app/text_corpus.h) or synthetic (random tokens). Unset:
  // fashion-mnist, or fortunes for a language model.
  std::optional<DataSet> data;
  std::string data_dir;                // default: the Debian package's directory (or file, for text)
  LevelConfig level = level_preset("L3");
  int epochs = 1;
  int64_t batch = 64;
  uint64_t seed = 0;
  int64_t train_limit = 0;  // first N training examples; 0 = all
  int64_t validation_limit = 0;  // first N test (or validation) examples evaluated; 0 = all
  double lr = 0.05;         // peak; SGD, momentum 0.9 (language models: AdamW)
  LrPlan lr_plan;           // cosine decay to 0 over the run, no warm-up unless asked
  std::string device = "cpu";  // or "cuda[:N]": model and batches there, data kept on the host
  // Language models (gpt2): the shape; the defaults are actkit pipeline's,
  // so its --init reads what --save writes here.
  LanguageModelShape shape;
  bool allow_non_finite = false;  // train on past a NaN or infinite loss
  // A Hugging Face folder (app/hf_folder.h): the model, its weights and, for
  // text, its tokenizer come from there; `model` and `shape` (but seq_len)
  // are not used.
  std::string init;
  std::string save;    // write the trained weights here (torch.save state dict)
  std::string save_hf; // with `init`: write the trained model here as a Hugging Face folder
  bool save_hf_over_init = false;  // save_hf may be `init` itself (its weights replaced)
  std::string resume;  // start from these weights (a state dict; the optimizer starts afresh)
};

struct TrainProgress {
  int epoch = 0;
  int64_t step = 0;
  int64_t steps_per_epoch = 0;
  double loss = 0;  // running mean over the epoch so far
};

struct TrainResult {
  std::string level;
  double final_test_accuracy = 0;   // image classifiers
  double final_validation_loss = 0; // language models: mean over the validation text
  double final_train_loss = 0;  // mean over the last epoch
  double step_time_ms = 0;      // mean training step, warm-up excluded
  std::string device;
  int64_t peak_bytes = 0;       // peak bytes on the device during training steps (evaluation excluded)
  int64_t activation_bytes = 0; // of the first step, measured as ActNN does
  int64_t steps = 0;
  int64_t train_examples = 0;
  int64_t test_examples = 0;
};

// The data set a run of `config` reads: config.data, or the model's default.
DataSet training_data_set(const TrainConfig& config);

// Trains on config.device and evaluates on the test split (language
// models: the validation text) after every epoch. Epoch e takes the
// examples at positions e·n .. (e + 1)·n - 1 of TrainingData's stream (n
// training examples; the last batch may be short). `on_progress` (may be
// empty) is called after each step. Throws
// actkit::InvalidInput for an unknown model, level, device or data set, a
// missing data directory, or non-positive epochs/batch.
TrainResult run_training(const TrainConfig& config, const std::function<void(const TrainProgress&)>& on_progress);

}  // namespace actkit::app
