#include "actkit/app/run_spec.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"

namespace actkit::app {

bool ModelSpec::text() const { return is_language_model(zoo); }

ModelOptions ModelSpec::options() const { return hf ? hf->options : training_model_options(zoo, shape); }

std::string ModelSpec::describe() const { return hf ? c10::str(init, " (", hf->architecture, ")") : zoo; }

void resolve_model(ModelSpec& spec, const std::string& command, bool checkpoint_init) {
  if (spec.hf || spec.init.empty() || (checkpoint_init && !is_hf_folder(spec.init))) return;
  HfModelInfo info = read_hf_config(spec.init);
  if (!is_language_model(info.zoo_name)) {
    throw InvalidInput(c10::str(command, ": --init ", spec.init, ": ", info.architecture,
                                " is not a language model (", command, " fine-tunes Hugging Face language models)"));
  }
  if (spec.shape.seq_len > info.options.max_positions) {
    throw InvalidInput(c10::str(command, ": --seq-len ", spec.shape.seq_len, " is longer than ", spec.init, "'s ",
                                info.options.max_positions, " positions"));
  }
  spec.zoo = info.zoo_name;
  spec.hf = std::move(info);
}

std::shared_ptr<ZooModel> open_model(const ModelSpec& spec, HfLoadReport* report) {
  return spec.hf ? load_hf_model(*spec.hf, report) : make_model(spec.zoo, spec.options());
}

std::shared_ptr<const Tokenizer> open_tokenizer(const ModelSpec& spec) {
  if (!spec.hf) return nullptr;
  std::shared_ptr<const Tokenizer> tokenizer = load_tokenizer(spec.init, &spec.hf->config_json);
  if (tokenizer->vocab_size() > spec.hf->options.vocab_size) {
    throw FormatError(c10::str(spec.init, ": the tokenizer has ", tokenizer->vocab_size(),
                               " tokens, the model's vocabulary ", spec.hf->options.vocab_size));
  }
  return tokenizer;
}

std::vector<std::pair<std::string, std::string>> model_data_settings(const RunSpec& spec) {
  const ModelSpec& m = spec.model;
  const LanguageModelShape& s = m.shape;
  std::vector<std::pair<std::string, std::string>> items;
  if (m.text()) {
    items.emplace_back("shape", m.hf ? c10::str("seq_len=", s.seq_len)
                                     : c10::str("layers=", s.layers, " hidden=", s.hidden, " heads=", s.heads,
                                                " seq_len=", s.seq_len, " dropout=", s.dropout, " vocab=", s.vocab));
  }
  items.emplace_back("data path", spec.data.path.empty() ? "default" : spec.data.path);
  if (!m.hf && !m.init.empty()) items.emplace_back("init", m.init);
  return items;
}

DataSet data_set(const RunSpec& spec) {
  if (spec.data.set) return *spec.data.set;
  return spec.model.text() ? DataSet::kFortunes : DataSet::kFashionMnist;
}

DataOptions data_options(const RunSpec& spec) {
  DataOptions d;
  d.set = data_set(spec);
  d.text = spec.model.text();
  check_data_kind(d.set, d.text);
  d.path = spec.data.path;
  d.seq_len = spec.model.shape.seq_len;
  d.vocab = spec.model.options().vocab_size;
  d.train_limit = spec.data.train_limit;
  d.validation_limit = spec.data.validation_limit;
  d.seed = spec.seed;
  d.tokenizer = open_tokenizer(spec.model);
  return d;
}

const char* to_string(RunCommand command) {
  switch (command) {
    case RunCommand::kTrain: return "train";
    case RunCommand::kDp: return "dp";
    case RunCommand::kPipeline: return "pipeline";
  }
  return "?";
}

RunSpec default_run_spec(RunCommand command) {
  RunSpec s;
  switch (command) {
    case RunCommand::kTrain:
      // The memory levels are the point of `actkit train`: L3 (2-bit
      // activations, ActNN's headline) on a CNN.
      s.model.zoo = "resnet18";
      s.level = level_preset("L3");
      break;
    case RunCommand::kDp:
      s.model.zoo = "resnet18";
      break;
    case RunCommand::kPipeline:
      // Seed 1 and a constant rate: how the pipeline's fidelity runs
      // (docs/fidelity.md) were made.
      s.model.zoo = "gpt2";
      s.seed = 1;
      s.lr_plan.schedule = LrSchedule::kConstant;
      break;
  }
  return s;
}

int64_t run_steps(const RunSpec& spec, double steps_per_epoch) {
  if (spec.steps > 0) return spec.steps;
  return std::max<int64_t>(1, int64_t(std::ceil(spec.epochs * steps_per_epoch)));
}

std::string optimizer_name(const RunSpec& spec, RunCommand command, bool replicated) {
  if (!spec.optimizer.empty()) return spec.optimizer;
  switch (command) {
    case RunCommand::kTrain: return spec.model.text() ? "adamw" : "sgd";
    case RunCommand::kDp: return "onebit-adam";  // the paper's, and the reason for the command
    case RunCommand::kPipeline: return replicated ? "adam" : "adamw";
  }
  return "adamw";
}

double peak_lr(const RunSpec& spec, RunCommand command) {
  if (spec.lr) return *spec.lr;
  const bool sgd = optimizer_name(spec, command) == "sgd";
  switch (command) {
    case RunCommand::kTrain: return sgd ? 0.05 : 1e-3;  // SGD with momentum 0.9; AdamW's usual peak
    case RunCommand::kDp: return 1e-3;                                 // Adam's and LAMB's usual peak
    case RunCommand::kPipeline: return 3e-4;                           // AdamW (or SGD) in every stage
  }
  return 1e-3;
}

double weight_decay(const RunSpec& spec, RunCommand command) {
  if (spec.weight_decay) return *spec.weight_decay;
  switch (command) {
    case RunCommand::kTrain: return optimizer_name(spec, command) == "sgd" ? 5e-4 : 0.01;  // the CNNs' usual; AdamW's
    case RunCommand::kDp: return 0;
    case RunCommand::kPipeline: return 0.01;
  }
  return 0;
}

void check_run_spec(const RunSpec& spec, const std::string& command) {
  if (!(spec.epochs > 0) || !std::isfinite(spec.epochs) || spec.steps < 0) {
    throw InvalidInput(c10::str(command, ": --epochs must be a finite number > 0 and --steps >= 0"));
  }
  if (spec.lr && (!(*spec.lr > 0) || !std::isfinite(*spec.lr))) {
    throw InvalidInput(c10::str(command, ": --lr: a finite rate > 0, got ", *spec.lr));
  }
  if (spec.weight_decay && (!(*spec.weight_decay >= 0) || !std::isfinite(*spec.weight_decay))) {
    throw InvalidInput(c10::str(command, ": --weight-decay: finite and >= 0, got ", *spec.weight_decay));
  }
  const ModelSpec& m = spec.model;
  check_data_kind(data_set(spec), m.text());
  if (m.text() && !m.hf && data_set(spec) == DataSet::kFortunes && m.shape.vocab < 256) {
    throw InvalidInput(c10::str(command, ": --vocab ", m.shape.vocab,
                                ": the fortunes text is read as bytes (0..255), so the vocabulary must be >= 256"));
  }
  const std::string& resume = spec.checkpoint.resume;
  if (!resume.empty() && files::exists(resume) && !files::is_directory(resume)) {
    throw InvalidInput(c10::str(command, ": --resume ", resume, " is a file: --resume continues the folder a --save "
                                "wrote (to start from a state dict's weights, give it to --init)"));
  }
  if (spec.checkpoint.save_every < 0) throw InvalidInput(c10::str(command, ": --save-every must be >= 0"));
  if (spec.eval_every < 0) throw InvalidInput(c10::str(command, ": --eval-every must be >= 0"));
  if (spec.checkpoint.save_every > 0 && spec.checkpoint.save.empty()) {
    throw InvalidInput(c10::str(command, ": --save-every needs --save DIR"));
  }
  if (!spec.checkpoint.save_hf.empty() && !m.hf) {
    throw InvalidInput(c10::str(command, ": --save-hf writes a Hugging Face folder: it needs --init with one"));
  }
}

}  // namespace actkit::app
