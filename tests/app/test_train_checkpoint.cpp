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
