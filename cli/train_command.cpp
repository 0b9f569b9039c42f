// `actkit train`: train a zoo CNN on Fashion-MNIST (or synthetic data) at a
// level, and report accuracy, loss, step time and memory.
#include <fmt/core.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/models/zoo.h"
#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "cli_util.h"
#include "progress.h"
#include "commands.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/measure/level_memory.h"
#include "actkit/app/model_defaults.h"
#include "actkit/measure/run_device.h"
#include "actkit/app/train_driver.h"

namespace actkit::cli {
namespace {

struct TrainArgs {
  app::TrainConfig config;
  std::string level = "L3";  // parsed into config.level before the run
  std::string json_path;
  std::string data;  // empty: the model's default
  bool compare = true;
  bool lr_given = false;
};

void run_train(TrainArgs& a) {
  app::TrainConfig& c = a.config;
  // Before the banner: a typo gets only the error. A Hugging Face folder
  // names its own model.
  std::optional<HfModelInfo> hf;
  if (!c.init.empty()) hf = read_hf_config(c.init);
  const std::string model = hf ? hf->zoo_name : c.model;
  const bool text = app::is_language_model(model);
  if (!a.data.empty()) c.data = parse_data_set(a.data);
  check_data_kind(app::training_data_set(c), text);
  // Output paths before the run spends its time.
  if (!c.save.empty()) files::check_writable_file(c.save);
  if (!c.save_hf.empty()) {
    if (!hf) throw InvalidInput("train: --save-hf needs --init with a Hugging Face folder");
    check_save_hf(c.save_hf, c.init, c.save_hf_over_init, "train");
  }
  if (!a.json_path.empty()) files::check_writable_file(a.json_path);
  if (text && !a.lr_given) c.lr = 1e-3;  // AdamW's, not SGD's
  c.level = parse_level(a.level);
  parse_run_device(c.device, "train");
  const std::string data = to_string(app::training_data_set(c));
  const std::string data_shown = describe_data(app::training_data_set(c), c.data_dir);
  const std::string what = hf ? fmt::format("{} ({})", c.init, hf->architecture) : c.model;
  fmt::print("training {} on {} at {} for {} epoch(s), batch {}{}\n", what, data_shown, c.level.spec, c.epochs, c.batch,
             c.device == "cpu" ? "" : ", on " + c.device);
  ProgressDisplay progress(false);
  const app::TrainResult r = app::run_training(c, [&](const app::TrainProgress& p) {
    progress.show(fmt::format("epoch {} step", p.epoch + 1), p.step, p.steps_per_epoch, p.loss, "");
  });
  if (text) {
    fmt::print("validation loss {:.4f}  train loss {:.4f}  step {:.1f} ms  peak {}\n", r.final_validation_loss,
               r.final_train_loss, r.step_time_ms, mib(r.peak_bytes));
  } else {
    fmt::print("test accuracy {:.2f}%  train loss {:.4f}  step {:.1f} ms  peak {}\n", 100 * r.final_test_accuracy,
               r.final_train_loss, r.step_time_ms, mib(r.peak_bytes));
  }
  if (!c.save.empty()) fmt::print("weights saved to {}\n", c.save);
  if (!c.save_hf.empty()) fmt::print("Hugging Face folder written to {}\n", c.save_hf);

  nlohmann::json j{{"model", model},
                   {"data", data},
                   {"level", c.level.spec},
                   {"device", r.device},
                   {"epochs", c.epochs},
                   {"batch", c.batch},
                   {"seed", c.seed},
                   {"train_examples", r.train_examples},
                   {"test_examples", r.test_examples},
                   {"steps", r.steps},
                   {"final_test_accuracy", r.final_test_accuracy},
                   {"final_validation_loss", r.final_validation_loss},
                   {"final_train_loss", r.final_train_loss},
                   {"step_time_ms", r.step_time_ms},
                   {"peak_bytes", r.peak_bytes},
                   {"activation_bytes", r.activation_bytes}};
  // Compared with L0 unless the level is plain fp32 training itself. An L5
  // run on CUDA holds the defrag allocator for the whole process, and L0
  // needs LibTorch's: that comparison takes a process of its own.
  const bool l0_needs_own_process = c.level.defrag_allocator && at::Device(c.device).is_cuda();
  if (a.compare && l0_needs_own_process) {
    fmt::print("L0 comparison skipped (L5 on CUDA): run `actkit memory --model {} --batch {} --image-size 28 "
               "--levels L0 --device {}` for it\n",
               model, c.batch, c.device);
  } else if (a.compare && (c.level.compresses_anything() || c.level.swap != SwapTarget::kNone)) {
    // One training step of the same model and batch at L0, for the saving.
    LevelMemoryConfig m;
    m.model = model;
    m.options = hf ? hf->options : app::training_model_options(c.model, c.shape);
    m.batch = c.batch;
    m.length = text ? c.shape.seq_len : 28;
    m.levels = {level_preset("L0")};
    m.steps = 1;
    m.seed = c.seed;
    m.device = c.device;
    const int64_t l0 = measure_level_memory(m).front().activation_bytes;
    fmt::print("activation memory per step: {} at {} vs {} at L0 ({:.1f}x less)\n", mib(r.activation_bytes), c.level.spec,
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
      app.add_subcommand("train", "Train a zoo CNN on Fashion-MNIST, or GPT-2 on text, at a level");
  train->add_option("--model", c.model, "Zoo model: an image classifier, or gpt2 or llama for text")->capture_default_str();
  train->add_option("--data", a->data,
                    "fashion-mnist or synthetic (images); fortunes or synthetic (gpt2) (default: the first)")
      ->check(CLI::IsMember({"fashion-mnist", "synthetic", "fortunes"}));
  train->add_option("--data-dir,--data-path", c.data_dir,
                    "Fashion-MNIST IDX directory, or the text file/directory (default: the Debian package's)");
  train->add_option("--init", c.init,
                    "A Hugging Face folder (config.json, safetensors, tokenizer): fine-tune its language model on "
                    "text tokenized by its tokenizer (--model and the shape flags are not used)");
  add_save_hf_options(train, &c.save_hf, &c.save_hf_over_init);
  train->add_option("--layers", c.shape.layers, "Language models: transformer blocks")->check(kPositiveNumber)
      ->capture_default_str();
  train->add_option("--hidden", c.shape.hidden, "Language models: hidden size")->check(kPositiveNumber)->capture_default_str();
  train->add_option("--heads", c.shape.heads, "Language models: attention heads")->check(kPositiveNumber)->capture_default_str();
  train->add_option("--seq-len", c.shape.seq_len, "Language models: tokens per example (bytes, or the --init folder's tokens)")->check(kPositiveNumber)
      ->capture_default_str();
  train->add_option("--dropout", c.shape.dropout, "Language models: dropout")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  train->add_option("--save", c.save, "Write the trained weights to this file (torch.save state dict)");
  train->add_option("--resume", c.resume, "Start from the weights in this file (a state dict)");
  train->add_option("--level", a->level, "Level, e.g. L0, L3 or L3:bits=1.5")->capture_default_str();
  train->add_option("--epochs", c.epochs, "Epochs")->check(kPositiveNumber)->capture_default_str();
  train->add_option("--batch", c.batch, "Batch size")->check(kPositiveNumber)->capture_default_str();
  train->add_option("--seed", c.seed, "Seed for weights, order and rounding")->capture_default_str();
  train->add_option("--train-limit", c.train_limit, "Use the first N training examples (0 = all)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  train->add_option("--validation-limit", c.validation_limit,
                    "Evaluate on the first N test (or validation) examples (0 = all)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  train->add_option("--device", c.device, "cpu or cuda[:N]")->capture_default_str();
  train->add_option("--lr", c.lr, "Peak learning rate (SGD momentum 0.9; gpt2: AdamW, default 1e-3)")
      ->check(kPositiveNumber)
      ->capture_default_str()
      ->each([a](const std::string&) { a->lr_given = true; });
  add_lr_options(train, &c.lr_plan);
  add_json_option(train, &a->json_path);
  add_allow_non_finite_flag(train, &c.allow_non_finite);
  train->add_flag("!--no-compare", a->compare, "Skip the L0 memory comparison step");
  train->callback([a] { run_train(*a); });
}

}  // namespace actkit::cli
