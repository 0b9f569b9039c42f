#include "run_flags.h"

#include "actkit/app/checkpoint_folder.h"
#include "actkit/core/enum_names.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/hf/hf_output.h"
#include "cli_util.h"

namespace actkit::cli {
namespace {

using app::RunCommand;

const char* model_help(RunCommand which) {
  return which == RunCommand::kPipeline ? "Zoo language model (gpt2, llama)"
                                        : "Zoo model: an image classifier, or a language model (gpt2, llama)";
}

const char* init_help(RunCommand which) {
  return which != RunCommand::kDp
             ? "Start from a state-dict file, a folder --save wrote, or a Hugging Face folder (its model, weights and "
               "tokenizer; --model and the shape but --seq-len are not used)"
             : "A Hugging Face folder of a language model: its model, weights and tokenizer (--model and the shape "
               "but --seq-len are not used)";
}

const char* save_help(RunCommand which) {
  switch (which) {
    case RunCommand::kTrain:
      return "Folder for the checkpoint (model.pt, a torch.save state dict, and the optimizer's state; --resume reads it)";
    case RunCommand::kDp: return "Folder for the model and every rank's optimizer state (a checkpoint --resume reads)";
    case RunCommand::kPipeline:
      return "Folder for each stage's checkpoint (parameters, optimizer, buffers; one --resume reads)";
  }
  return "";
}

const char* resume_help(RunCommand which) {
  return which == RunCommand::kTrain
             ? "Continue the run a --save folder holds, exactly (same settings; a run started from a Hugging Face "
               "folder names it again with --init)"
             : "Continue the run a --save folder holds, exactly (same ranks and settings; a run started from a "
               "Hugging Face folder finds it again)";
}

const char* optimizer_help(RunCommand which) {
  switch (which) {
    case RunCommand::kTrain: return "adamw or sgd (default: adamw for language models, sgd for the image classifiers)";
    case RunCommand::kDp: return "adam, lamb, onebit-adam, onebit-lamb, fp16-adam or fp16-lamb (default onebit-adam)";
    case RunCommand::kPipeline:
      return "Each stage's: adamw or sgd (default adamw); with --dp, across the replicas: adam, lamb, onebit-adam, "
             "onebit-lamb, fp16-adam or fp16-lamb (default adam)";
  }
  return "";
}

const char* lr_help(RunCommand which) {
  switch (which) {
    case RunCommand::kTrain: return "Peak learning rate (default: SGD 0.05, AdamW 1e-3)";
    case RunCommand::kDp: return "Peak learning rate (default 1e-3)";
    case RunCommand::kPipeline: return "Peak learning rate (default 3e-4)";
  }
  return "";
}

}  // namespace

void add_model_flags(CLI::App* command, app::ModelSpec* model, RunCommand which) {
  command->add_option("--model", model->zoo, model_help(which))->capture_default_str();
  app::LanguageModelShape& s = model->shape;
  command->add_option("--layers", s.layers, "Language models: transformer blocks")->check(kPositiveNumber)
      ->capture_default_str();
  command->add_option("--hidden", s.hidden, "Language models: hidden size")->check(kPositiveNumber)
      ->capture_default_str();
  command->add_option("--heads", s.heads, "Language models: attention heads")->check(kPositiveNumber)
      ->capture_default_str();
  command->add_option("--seq-len", s.seq_len, "Language models: tokens per example")->check(kPositiveNumber)
      ->capture_default_str();
  command->add_option("--dropout", s.dropout, "Language models: dropout")->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--vocab", s.vocab, "Language models from scratch: vocabulary (256: bytes)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 24))
      ->capture_default_str();
  command->add_option("--init", model->init, init_help(which));
}

void add_data_flags(CLI::App* command, app::DataSpec* data) {
  command
      ->add_option_function<std::string>(
          "--data", [data](const std::string& name) { data->set = parse_data_set(name); },
          "fashion-mnist or synthetic (images); fortunes or synthetic (language models) (default: the first)")
      ->check(CLI::IsMember(data_set_names()));
  command->add_option("--data-path,--data-dir", data->path,
                      "Fashion-MNIST IDX folder, or the text file or folder (default: the Debian package's)");
  command->add_option("--train-limit", data->train_limit, "Use the first N training examples (0 = all)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  command->add_option("--validation-limit", data->validation_limit,
                      "Evaluate on the first N test (or validation) examples (0 = all)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
}

void add_checkpoint_flags(CLI::App* command, app::CheckpointSpec* checkpoint, RunCommand which) {
  command->add_option("--save", checkpoint->save, save_help(which));
  command->add_option("--resume", checkpoint->resume, resume_help(which));
  command->add_option("--save-every", checkpoint->save_every, "Also checkpoint to --save every N steps")
      ->check(kNonNegativeNumber);
  command->add_option("--save-hf", checkpoint->save_hf,
                      "With --init a Hugging Face folder: write the trained model here as one (a new or empty "
                      "folder, or one ACTkit wrote)");
  command->add_flag("--save-hf-over-init", checkpoint->save_hf_over_init,
                    "Let --save-hf be the --init folder itself: its weights are replaced by the trained ones");
}

void add_training_flags(CLI::App* command, app::RunSpec* run, RunCommand which) {
  command
      ->add_option_function<std::string>(
          "--level", [run](const std::string& spec) { run->level = parse_level(spec); },
          "Activation-compression level, e.g. L0, L3 or L3:bits=1.5")
      ->default_str(run->level.spec);
  command->add_option("--optimizer", run->optimizer, optimizer_help(which));
  command
      ->add_option_function<double>(
          "--lr", [run](double lr) { run->lr = lr; }, lr_help(which))
      ->check(kPositiveNumber);
  command
      ->add_option_function<std::string>(
          "--lr-schedule", [run](const std::string& name) { run->lr_plan.schedule = app::parse_lr_schedule(name); },
          "After the warm-up: cosine (decay to 0) or constant")
      ->check(CLI::IsMember(app::lr_schedule_names()))
      ->default_str(app::to_string(run->lr_plan.schedule));
  command->add_option("--lr-warmup-steps", run->lr_plan.warmup_steps,
                      "Steps over which the learning rate rises linearly to --lr (fewer than the run's steps)")
      ->check(CLI::Range(int64_t(0), app::kMaxLrWarmupSteps))
      ->capture_default_str();
  command
      ->add_option_function<double>(
          "--weight-decay", [run](double decay) { run->weight_decay = decay; },
          "Weight decay (default: train SGD 5e-4, AdamW 0.01; dp 0; pipeline 0.01)")
      ->check(kNonNegativeNumber);
  command->add_option("--seed", run->seed, "Seed for weights, data order and rounding")->capture_default_str();
  CLI::Option* epochs =
      command->add_option("--epochs", run->epochs, "Passes over the training examples (a fraction ends within one)")
          ->check(kPositiveNumber)
          ->capture_default_str();
  command->add_option("--steps", run->steps, "Optimizer steps (instead of --epochs)")
      ->check(kPositiveNumber)
      ->excludes(epochs);
  command->add_option("--eval-every", run->eval_every,
                      "Also evaluate every N steps (the JSON's evaluations: each with the training seconds by then)")
      ->check(kNonNegativeNumber);
  command->add_flag("--allow-non-finite", run->allow_non_finite,
                    "Train on past a NaN or infinite loss (default: stop, naming the step)");
}

void add_run_flags(CLI::App* command, app::RunSpec* run, RunCommand which) {
  add_model_flags(command, &run->model, which);
  add_data_flags(command, &run->data);
  add_checkpoint_flags(command, &run->checkpoint, which);
  add_training_flags(command, run, which);
}

void finish_run_spec(app::RunSpec& run, RunCommand which) {
  app::resolve_model(run.model, to_string(which), which != RunCommand::kDp);
  app::check_run_spec(run, to_string(which));
}

void check_run_outputs(const app::RunSpec& run, RunCommand which) {
  const app::CheckpointSpec& c = run.checkpoint;
  const std::string command = to_string(which);
  if (!c.save.empty() && c.save == c.save_hf) {
    throw InvalidInput(command + ": --save and --save-hf name one folder (" + c.save + "): give each its own");
  }
  if (!c.save_hf.empty()) {
    check_hf_output(c.save_hf, run.model.init, c.save_hf_over_init, command + ": --save-hf");
    files::check_writable_folder(c.save_hf);
  }
  if (!c.resume.empty()) files::FolderLock::check_free(c.resume);
  if (!c.save.empty()) {
    app::check_checkpoint_folder(c.save, command + ": --save");
    files::check_writable_folder(c.save);
  }
}

}  // namespace actkit::cli
