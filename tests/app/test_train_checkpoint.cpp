// `actkit train`'s checkpoint folder (app/worker_checkpoint.h through
// app/train_driver.h): a run saved part-way and resumed ends as the
// straight run does, dropout and rounding included; a resume with other
// settings is refused by name; and the training loop checks a step's loss
// before it checkpoints, so a bad step never replaces the last good commit.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "actkit/app/checkpoint_folder.h"
#include "actkit/app/train_driver.h"
#include "actkit/app/training_loop.h"
#include "actkit/converters/run_settings.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "test_util.h"
#include "app/small_run.h"

using namespace actkit;

namespace {

// A small GPT-2 at L3 with dropout (both draw random numbers each step) on
// 48 synthetic examples at batch 16: 3 steps an epoch. The rate is
// constant, so a shorter run takes the same first steps.
app::TrainConfig small_train() {
  app::TrainConfig c;
  make_small_text_run(c.run, {1, 16, 2, 8, 0.1}, 48);
  c.run.data.validation_limit = 16;
  c.run.level = level_preset("L3");
  c.run.lr_plan.schedule = app::LrSchedule::kConstant;
  c.batch = 16;
  return c;
}

}  // namespace

// Saved after 4 of 7 steps (inside the second epoch) and resumed: the losses
// and the validation of the straight run, bit for bit.
TEST(TrainCheckpoint, ResumesBitForBit) {
  TempDir dir;
  app::TrainConfig straight = small_train();
  straight.run.steps = 7;
  const app::TrainResult reference = app::run_training(straight, nullptr);
  ASSERT_EQ(reference.train_losses.size(), 7u);

  app::TrainConfig first = small_train();
  first.run.steps = 4;
  first.run.checkpoint.save = dir.file("ckpt");
  app::run_training(first, nullptr);
  EXPECT_EQ(app::committed_folder(dir.file("ckpt")), app::step_folder(dir.file("ckpt"), 4));
  EXPECT_TRUE(files::exists(dir.file("ckpt/model.pt")));  // the copy where users look

  app::TrainConfig rest = small_train();
  rest.run.steps = 7;
  rest.run.checkpoint.resume = dir.file("ckpt");
  const app::TrainResult resumed = app::run_training(rest, nullptr);
  EXPECT_EQ(resumed.first_step, 4);
  ASSERT_EQ(resumed.train_losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.train_losses[i], reference.train_losses[4 + i]) << "step " << 5 + i;
  EXPECT_EQ(resumed.final_validation_loss, reference.final_validation_loss);

  // Other settings, or nothing left to run, or a file: refused, naming why
  // (another optimizer by name, not by its state failing to load).
  auto refused_naming = [&](app::TrainConfig other, const std::string& what) {
    try {
      app::run_training(other, nullptr);
      ADD_FAILURE() << "a resume with another " << what << " was accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  app::TrainConfig other = rest;
  other.batch = 8;
  refused_naming(other, "batch");
  other = rest;
  other.run.optimizer = "sgd";
  refused_naming(other, "optimizer");
  other = rest;
  other.run.model.shape.dropout = 0.2;
  refused_naming(other, "dropout");
  app::TrainConfig done = rest;
  done.run.steps = 4;
  EXPECT_THROW(app::run_training(done, nullptr), InvalidInput);
  app::TrainConfig file = rest;
  file.run.checkpoint.resume = dir.file("ckpt/model.pt");
  EXPECT_THROW(app::run_training(file, nullptr), InvalidInput);

  // --init of the folder: its weights, with this run's own settings and a fresh optimizer.
  app::TrainConfig tuned = small_train();
  tuned.run.steps = 1;
  tuned.run.optimizer = "sgd";
  tuned.run.model.init = dir.file("ckpt");
  const app::TrainResult from_folder = app::run_training(tuned, nullptr);
  tuned.run.model.init.clear();
  EXPECT_NE(from_folder.train_losses[0], app::run_training(tuned, nullptr).train_losses[0]);
}

// --save-every: the folder's commit follows the run, and a run stopped by
// a loss that is not finite leaves the last good step committed.
TEST(TrainingLoop, ChecksTheLossBeforeItCheckpoints) {
  std::vector<int64_t> saved;
  app::TrainingLoop loop;
  loop.steps = 6;
  loop.save_every = 1;
  loop.save = [&](int64_t steps_done) { saved.push_back(steps_done); };
  loop.step = [](int64_t step) {
    app::LoopStep s;
    s.loss = step == 3 ? std::nan("") : 1.0;
    return s;
  };
  EXPECT_THROW(app::run_training_loop(loop), Error);
  EXPECT_EQ(saved, (std::vector<int64_t>{1, 2, 3}));  // never the 4th, whose loss is NaN
  saved.clear();
  loop.allow_non_finite = true;
  app::run_training_loop(loop);
  EXPECT_EQ(saved, (std::vector<int64_t>{1, 2, 3, 4, 5}));  // the last is the command's own save
}

// --eval-every and the command's own evaluations: after the step's
// checkpoint, never after the last step (the command's own), each with the
// steps' time by then; a due evaluation without its function is refused.
TEST(TrainingLoop, EvaluatesWhenDueWithTheTrainingTimeByThen) {
  std::vector<std::string> order;
  std::vector<int64_t> reported;
  app::TrainingLoop loop;
  loop.steps = 7;
  loop.save_every = 3;
  loop.save = [&](int64_t done) { order.push_back("save " + std::to_string(done)); };
  loop.evaluate_every = 3;
  loop.evaluate_also = [](int64_t done) { return done == 5; };
  loop.step = [](int64_t) {
    app::LoopStep s;
    s.loss = 1;
    s.seconds = 0.5;
    return s;
  };
  loop.on_step = [&](const app::StepProgress& p) {
    if (p.evaluation) reported.push_back(p.evaluation->step);
  };
  EXPECT_THROW(app::run_training_loop(loop), InvalidInput);
  loop.evaluate = [&](int64_t done) {
    order.push_back("evaluate " + std::to_string(done));
    return 10.0 * double(done);
  };
  const app::LoopResult r = app::run_training_loop(loop);
  EXPECT_EQ(order, (std::vector<std::string>{"save 3", "evaluate 3", "evaluate 5", "save 6", "evaluate 6"}));
  EXPECT_EQ(reported, (std::vector<int64_t>{3, 5, 6}));
  ASSERT_EQ(r.evaluations.size(), 3u);
  EXPECT_EQ(r.evaluations[1].step, 5);
  EXPECT_EQ(r.evaluations[1].train_seconds, 2.5);
  EXPECT_EQ(r.evaluations[1].value, 50.0);
  EXPECT_EQ(r.train_seconds, 3.5);
  const nlohmann::json j = app::evaluations_json(r.evaluations, "val_loss");
  EXPECT_EQ(j[2]["step"], 6);
  EXPECT_EQ(j[2]["val_loss"], 60.0);
  // A due step that is the last is the command's own evaluation, not the loop's.
  loop.steps = 6;
  loop.evaluate_also = nullptr;
  EXPECT_EQ(app::run_training_loop(loop).evaluations.size(), 1u);  // after step 3 only
}

// Evaluating during the run changes no step of it: the training losses and
// the final evaluation are those of the run without, bit for bit.
TEST(TrainCheckpoint, EvaluatingEveryFewStepsChangesNoStep) {
  app::TrainConfig plain = small_train();
  plain.run.steps = 5;  // 3 steps an epoch: evaluated after steps 3 and 5
  const app::TrainResult reference = app::run_training(plain, nullptr);
  app::TrainConfig often = plain;
  often.run.eval_every = 2;
  const app::TrainResult r = app::run_training(often, nullptr);
  EXPECT_EQ(r.train_losses, reference.train_losses);
  EXPECT_EQ(r.final_validation_loss, reference.final_validation_loss);
  std::vector<int64_t> steps;
  for (const app::Evaluation& e : r.evaluations) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 3, 4, 5}));
  ASSERT_EQ(reference.evaluations.size(), 2u);
  EXPECT_EQ(reference.evaluations[0].value, r.evaluations[1].value);
  EXPECT_EQ(r.evaluations.back().value, r.final_validation_loss);
  EXPECT_LT(r.evaluations[0].train_seconds, r.evaluations[3].train_seconds);
}

// Settings a command records are compared item by item; ones added since a
// checkpoint was saved (at the end) are not held against it, and an item
// is never a prefix of another ("a=1" of "a=10").
TEST(RunSettings, ACheckpointIsCheckedOnTheSettingsItHas) {
  const std::string saved = run_settings_text({{"model", "gpt2"}, {"lr", "1"}}, {});
  EXPECT_NO_THROW(check_run_settings(saved, saved, "resume", "f"));
  EXPECT_NO_THROW(check_run_settings(saved, run_settings_text({{"model", "gpt2"}, {"lr", "1"}, {"shape", "x"}}, {}),
                                     "resume", "f"));
  EXPECT_THROW(check_run_settings(saved, run_settings_text({{"model", "gpt2"}, {"lr", "10"}}, {}), "resume", "f"),
               FormatError);
  EXPECT_THROW(check_run_settings(saved, run_settings_text({{"model", "gpt2"}}, {}), "resume", "f"), FormatError);
}
