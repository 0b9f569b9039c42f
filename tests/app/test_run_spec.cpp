// The run spec the training commands share (app/run_spec.h): one place for
// the defaults, the length of a run, a Hugging Face folder read once, and
// the checks every command makes; `actkit train` over a fraction of an epoch.
#include <gtest/gtest.h>

#include "actkit/app/run_spec.h"
#include "actkit/app/train_driver.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"
#include "test_paths.h"
#include "test_util.h"
#include "app/small_run.h"

using namespace actkit;
using app::RunCommand;

namespace {

// A folder holding the config.json of a small GPT-2 (64 positions) with
// `vocab` tokens and `eos` as its end of text; returns the file's text.
std::string gpt2_folder(const std::string& dir, int64_t vocab, int64_t eos) {
  files::create_directories(dir);
  const std::string config = R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "activation_function": "gelu_new", "vocab_size": )" + std::to_string(vocab) + R"(, "n_positions": 64, "n_embd": 16,
    "n_layer": 1, "n_head": 2, "n_inner": null, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true,
    "eos_token_id": )" + std::to_string(eos) + "}";
  files::write_file_atomic(dir + "/config.json", config.data(), config.size());
  return config;
}

}  // namespace

TEST(RunSpec, EachCommandsDefaultsLiveInOnePlace) {
  const app::RunSpec train = app::default_run_spec(RunCommand::kTrain);
  EXPECT_EQ(train.model.zoo, "resnet18");
  EXPECT_EQ(train.level.spec, "L3");
  EXPECT_DOUBLE_EQ(app::peak_lr(train, RunCommand::kTrain), 0.05);  // SGD for the CNNs
  app::RunSpec text = train;
  text.model.zoo = "gpt2";
  EXPECT_DOUBLE_EQ(app::peak_lr(text, RunCommand::kTrain), 1e-3);  // AdamW for text
  EXPECT_DOUBLE_EQ(app::weight_decay(text, RunCommand::kTrain), 0.01);
  const app::RunSpec pipeline = app::default_run_spec(RunCommand::kPipeline);
  EXPECT_EQ(pipeline.seed, 1u);
  EXPECT_EQ(pipeline.lr_plan.schedule, app::LrSchedule::kConstant);
  EXPECT_DOUBLE_EQ(app::peak_lr(pipeline, RunCommand::kPipeline), 3e-4);
  app::RunSpec given = pipeline;
  given.lr = 0.5;
  given.weight_decay = 0.0;
  EXPECT_DOUBLE_EQ(app::peak_lr(given, RunCommand::kPipeline), 0.5);  // a flag's value wins
  EXPECT_DOUBLE_EQ(app::weight_decay(given, RunCommand::kPipeline), 0.0);
}

// One --optimizer: each command's default, and the rate and decay that
// follow the optimizer (not the model) in train.
TEST(RunSpec, TheOptimizerDefaultsByCommand) {
  app::RunSpec spec = app::default_run_spec(RunCommand::kTrain);
  EXPECT_EQ(app::optimizer_name(spec, RunCommand::kTrain), "sgd");
  spec.model.zoo = "gpt2";
  EXPECT_EQ(app::optimizer_name(spec, RunCommand::kTrain), "adamw");
  spec.optimizer = "sgd";  // SGD on a language model: SGD's rate and decay
  EXPECT_DOUBLE_EQ(app::peak_lr(spec, RunCommand::kTrain), 0.05);
  EXPECT_DOUBLE_EQ(app::weight_decay(spec, RunCommand::kTrain), 5e-4);
  EXPECT_EQ(app::optimizer_name(app::default_run_spec(RunCommand::kDp), RunCommand::kDp), "onebit-adam");
  const app::RunSpec pipeline = app::default_run_spec(RunCommand::kPipeline);
  EXPECT_EQ(app::optimizer_name(pipeline, RunCommand::kPipeline), "adamw");
  // Across --dp replicas the default is a data-parallel optimizer (adamw is none: `pipeline --dp 2` was refused).
  EXPECT_EQ(app::optimizer_name(pipeline, RunCommand::kPipeline, true), "adam");
}

TEST(RunSpec, StepsCountInsteadOfEpochsAndAFractionEndsWithinAnEpoch) {
  app::RunSpec s = app::default_run_spec(RunCommand::kDp);
  s.epochs = 2;
  EXPECT_EQ(app::run_steps(s, 10), 20);
  s.epochs = 0.25;
  EXPECT_EQ(app::run_steps(s, 10), 3);  // ⌈2.5⌉
  s.epochs = 0.01;
  EXPECT_EQ(app::run_steps(s, 10), 1);  // at least one step
  s.steps = 7;
  EXPECT_EQ(app::run_steps(s, 10), 7);
  s.steps = -1;
  EXPECT_THROW(app::check_run_spec(s, "dp"), InvalidInput);
  s.steps = 0;
  s.epochs = 0;
  EXPECT_THROW(app::check_run_spec(s, "dp"), InvalidInput);
}

TEST(RunSpec, RefusesWhatNoCommandRuns) {
  app::RunSpec s = app::default_run_spec(RunCommand::kTrain);
  EXPECT_NO_THROW(app::check_run_spec(s, "train"));
  s.lr = -1.0;
  EXPECT_THROW(app::check_run_spec(s, "train"), InvalidInput);
  s = app::default_run_spec(RunCommand::kTrain);
  s.data.set = DataSet::kFortunes;  // text, for an image classifier
  EXPECT_THROW(app::check_run_spec(s, "train"), InvalidInput);
  s = app::default_run_spec(RunCommand::kPipeline);
  s.model.shape.vocab = 100;  // the fortunes are bytes
  EXPECT_THROW(app::check_run_spec(s, "pipeline"), InvalidInput);
  s.data.set = DataSet::kSynthetic;
  EXPECT_NO_THROW(app::check_run_spec(s, "pipeline"));
  s.checkpoint.save_hf = "out";  // without a folder to start from
  EXPECT_THROW(app::check_run_spec(s, "pipeline"), InvalidInput);
}

// config.json is read once per run: once resolved, the spec carries what
// it said (here the file is gone by the second call, and nothing fails).
TEST(RunSpec, AFoldersConfigIsReadOnceAndNamesTheModel) {
  test::TempDir dir;
  const std::string hf = dir.path() + "/model";
  const std::string config = gpt2_folder(hf, 300, 7);
  app::ModelSpec m;
  m.zoo = "resnet18";  // a folder names its own model
  m.init = hf;
  m.shape.seq_len = 32;
  app::resolve_model(m, "train");
  ASSERT_TRUE(m.hf.has_value());
  EXPECT_EQ(m.zoo, "gpt2");
  EXPECT_EQ(m.options().vocab_size, 300);
  EXPECT_EQ(m.hf->end_ids, std::vector<int64_t>{7});
  files::remove_all(hf + "/config.json");
  EXPECT_NO_THROW(app::resolve_model(m, "train"));
  // Longer examples than the folder's positions: refused, naming both.
  files::write_file_atomic(hf + "/config.json", config.data(), config.size());
  app::ModelSpec long_text;
  long_text.init = hf;
  long_text.shape.seq_len = 65;
  EXPECT_THROW(app::resolve_model(long_text, "train"), InvalidInput);
  // An --init that is no folder of a model: refused (train trained a zoo
  // model from scratch instead), unless the command also starts from
  // checkpoints (pipeline), which then reads it itself.
  app::ModelSpec typo;
  typo.init = dir.path() + "/modle";
  EXPECT_THROW(app::resolve_model(typo, "train"), FormatError);
  EXPECT_NO_THROW(app::resolve_model(typo, "pipeline", /*checkpoint_init=*/true));
  EXPECT_FALSE(typo.hf.has_value());
}

// The tokenizer takes the special ids from the config.json read once (a
// file changed or broken since is not read again), and only generation
// reads generation_config.json (a broken one stops no training).
TEST(RunSpec, TheTokenizerAndTrainingReadNothingTwice) {
  test::TempDir dir;
  const std::string hf = dir.path() + "/model";
  gpt2_folder(hf, 1504, 1000);
  files::copy_file(std::string(ACTKIT_TOKENIZER_FIXTURES) + "/gpt2/tokenizer.json", hf + "/tokenizer.json");
  const std::string broken = "{not json";
  files::write_file_atomic(hf + "/generation_config.json", broken.data(), broken.size());
  app::ModelSpec m;
  m.init = hf;
  m.shape.seq_len = 16;
  ASSERT_NO_THROW(app::resolve_model(m, "train"));
  EXPECT_THROW(hf_end_ids(*m.hf), FormatError);  // generate alone reads it
  files::write_file_atomic(hf + "/config.json", broken.data(), broken.size());
  const auto tokenizer = app::open_tokenizer(m);
  ASSERT_TRUE(tokenizer->eos_id().has_value());
  EXPECT_EQ(*tokenizer->eos_id(), 1000);
}

// --epochs 0.5 of 64 examples at batch 16: two steps, one evaluation.
TEST(RunSpec, TrainRunsAFractionOfAnEpoch) {
  app::TrainConfig c;
  make_small_text_run(c.run, {1, 16, 2, 8, 0.0}, 64);
  c.run.data.validation_limit = 16;
  c.run.level = level_preset("L0");
  c.run.epochs = 0.5;
  c.batch = 16;
  const app::TrainResult r = app::run_training(c, nullptr);
  EXPECT_EQ(r.steps, 2);
  EXPECT_TRUE(std::isfinite(r.final_validation_loss));
  c.run.steps = 5;  // counts instead: a whole epoch of 4, then 1
  EXPECT_EQ(app::run_training(c, nullptr).steps, 5);
}
