// What every training run is made of, shared by `actkit train`, `actkit dp`
// and `actkit pipeline` (and, for its model, `actkit generate`): the model,
// the data, where checkpoints go, the learning rate, the level and the
// seed. Each command's config holds one RunSpec; the command line declares
// each of its flags once (cli/run_flags.h), with one meaning, and the
// defaults are the ones below.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actkit/app/lr_schedule.h"
#include "actkit/app/model_defaults.h"
#include "actkit/core/level.h"
#include "actkit/data/training_data.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/models/zoo.h"

namespace actkit {
class Tokenizer;
}

namespace actkit::app {

// The model a run trains: a zoo model at a shape, or the model of a Hugging
// Face folder, whose config.json resolve_model reads once per process.
struct ModelSpec {
  std::string zoo = "gpt2";  // --model; with a folder, its zoo_name
  LanguageModelShape shape;  // language models: the shape from scratch (a folder's but seq_len is its own)
  // --init: a Hugging Face folder (its model, weights and tokenizer); for
  // `actkit train` and `pipeline` also a state-dict file or a --save folder
  // (its weights, to start from with this run's settings).
  std::string init;
  std::optional<HfModelInfo> hf;  // init's config.json, once resolve_model has read it

  bool text() const;            // a language model. Throws InvalidInput for an unknown zoo model.
  ModelOptions options() const;  // the folder's, or training_model_options(zoo, shape)
  std::string describe() const;  // "DIR (Qwen2ForCausalLM)" for a folder, else the zoo name
};

// When `spec.init` is given and its config.json has not been read yet:
// reads it (read_hf_config) and takes the zoo model from it. A folder names
// its own model: spec.zoo is replaced. With `checkpoint_init` (`actkit train`
// and `pipeline`, which also start from a state-dict file or a --save folder),
// an `init` that is not a Hugging Face folder is left to the caller.
// Throws FormatError for a folder read_hf_config refuses (an `init` with no
// config.json included), InvalidInput (naming `command`) for a folder whose
// model is not a language model or whose positions are fewer than
// shape.seq_len.
void resolve_model(ModelSpec& spec, const std::string& command, bool checkpoint_init = false);

// The model with its first weights, in fp32 on the CPU: the folder's
// (spec resolved; `report`, when given, says what was read), or the zoo's
// at spec.options(), drawn from LibTorch's generator as the caller seeded
// it.
std::shared_ptr<ZooModel> open_model(const ModelSpec& spec, HfLoadReport* report = nullptr);

// The folder's tokenizer (null without a folder), checked against the
// model's vocabulary. Throws FormatError naming the folder when the
// tokenizer has more tokens than the model's vocabulary.
std::shared_ptr<const Tokenizer> open_tokenizer(const ModelSpec& spec);

// What a run reads (data/training_data.h), as the flags give it.
struct DataSpec {
  std::optional<DataSet> set;  // --data; unset: fortunes for a language model, fashion-mnist for images
  std::string path;            // --data-path: empty: the Debian package's
  int64_t train_limit = 0;     // --train-limit: the first N training examples (0: all)
  int64_t validation_limit = 0;  // --validation-limit: the first N validation examples (0: all)
};

// Where a run's results go and what it starts from.
struct CheckpointSpec {
  std::string save;    // --save: a folder of ACTkit's checkpoint (checkpoint_folder.h)
  std::string resume;  // --resume: continue the run a --save folder holds, exactly
  int64_t save_every = 0;  // --save-every: also checkpoint to `save` every N steps (0: at the end only)
  std::string save_hf;            // --save-hf: the trained model as a Hugging Face folder (needs a folder --init)
  bool save_hf_over_init = false;  // --save-hf-over-init: save_hf may be the --init folder itself
};

// The commands that train, for their defaults.
enum class RunCommand { kTrain, kDp, kPipeline };
const char* to_string(RunCommand command);  // "train", "dp", "pipeline"

struct RunSpec {
  ModelSpec model;
  DataSpec data;
  CheckpointSpec checkpoint;
  LevelConfig level = level_preset("L0");  // --level
  // --optimizer (empty: optimizer_name's default). run_training reads it;
  // dp and pipeline take theirs parsed into their configs, which the CLI
  // fills from it.
  std::string optimizer;
  std::optional<double> lr;                // --lr: the peak (unset: peak_lr's default)
  LrPlan lr_plan;                          // --lr-schedule, --lr-warmup-steps
  std::optional<double> weight_decay;      // --weight-decay (unset: weight_decay's default)
  uint64_t seed = 0;                       // --seed: weights, data order, rounding
  // How long: `steps` optimizer steps when > 0 (--steps), else `epochs`
  // passes over the training examples (--epochs; a fraction ends within an
  // epoch: ⌈epochs · steps per epoch⌉ steps).
  double epochs = 1;
  int64_t steps = 0;
  bool allow_non_finite = false;           // --allow-non-finite: train on past a NaN or infinite loss
  // --eval-every: also evaluate after every N steps (0: only where the
  // command does: train after each epoch, dp and pipeline at the end); the
  // results list each evaluation with the training time by then, a
  // learning curve against time.
  int64_t eval_every = 0;
};

// Each command's defaults, in this one place: the model, the level, the
// schedule, the seed (run_spec.cpp says why each is what it is).
RunSpec default_run_spec(RunCommand command);
// The optimizer steps a run of `spec` takes at `steps_per_epoch` (a pass
// over the examples may end within a step; the result is at
// least 1).
int64_t run_steps(const RunSpec& spec, double steps_per_epoch);

// The optimizer a run uses, by name: the spec's, or the command's default
// (train: adamw for language models, sgd for the image classifiers; dp:
// onebit-adam; pipeline: adamw in each stage, or adam across `replicated`
// copies of the pipeline). Whether the command takes that name is the
// command's check (optim/local_optimizer.h, optim/optimizer_choice.h).
std::string optimizer_name(const RunSpec& spec, RunCommand command, bool replicated = false);

// The peak rate and the weight decay a run uses: the spec's, or the
// command's default for its model and optimizer.
double peak_lr(const RunSpec& spec, RunCommand command);
double weight_decay(const RunSpec& spec, RunCommand command);

// What a checkpoint of `spec` records of its model and data beyond their
// names, and a resumed run must share: a language model's shape (a
// folder's: its tokens per example), the data path, a start that is no
// Hugging Face folder. Name-value pairs, for run_settings_text.
std::vector<std::pair<std::string, std::string>> model_data_settings(const RunSpec& spec);

// The data set a run of `spec` reads: data.set, or the model's default.
DataSet data_set(const RunSpec& spec);

// The training data's options for `spec` (its model resolved): the set,
// text or images by the model, the tokens per example, the vocabulary, the
// folder's tokenizer, the limits and the seed. Throws InvalidInput when the
// set is not of the kind the model reads.
DataOptions data_options(const RunSpec& spec);

// The checks every training command makes of a spec before anything
// starts: positive finite epochs and non-negative steps, a positive finite learning rate, a finite non-negative weight
// decay (either when given), a
// data set of the model's kind, fortunes read as bytes only into a
// vocabulary of at least 256, --save-hf only from a Hugging Face folder.
// Throws InvalidInput naming `command` and the flag.
void check_run_spec(const RunSpec& spec, const std::string& command);

}  // namespace actkit::app
