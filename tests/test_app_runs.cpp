// app::run_dp_worker and app::run_pipeline_rank called directly, in this
// process, as a group of one (the multi-process runs are test_pipeline's,
// test_data_parallel's and scripts/test.sh's).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "actkit/app/dp_run.h"
#include "actkit/app/pipeline_run.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

using namespace actkit;

namespace {

GroupConfig one_rank() {
  GroupConfig g;
  g.master_port = free_local_port();
  g.timeout = std::chrono::seconds(60);
  return g;
}

app::DpRunConfig small_dp() {
  app::DpRunConfig c;
  c.model = "gpt2";
  c.shape = {1, 32, 2, 16, 0.0};
  c.data.set = app::DataSet::kSynthetic;
  c.data.train_limit = 64;
  c.optimizer = optim::parse_optimizer_choice("adam");
  c.batch = 4;
  c.steps = 4;
  c.group = one_rank();
  return c;
}

app::PipelineRunConfig small_pipeline() {
  app::PipelineRunConfig c;
  pipeline::PipelineConfig& p = c.pipeline;
  p.model_options = app::language_model_options({1, 32, 2, 16, 0.0});
  p.seq_len = 16;
  p.stages = 1;
  p.micro_batches = 2;
  p.micro_batch_size = 2;
  c.data.set = app::DataSet::kSynthetic;
  c.data.train_limit = 32;
  c.validation_batches = 2;
  c.steps = 4;
  c.group = one_rank();
  return c;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = files::temp_directory() + "/actkit-app-runs-" + name;
  files::remove_all(dir);
  return dir;
}

}  // namespace

// The first step's loss is the model's loss on the first batch of the
// stream, from the seeded initial weights; every step is reported.
TEST(DpRun, FirstLossIsTheSeededModelOnTheFirstBatch) {
  const app::DpRunConfig c = small_dp();
  std::vector<int64_t> steps_seen;
  app::DpCallbacks cb;
  cb.on_step = [&](const app::StepProgress& p) { steps_seen.push_back(p.step); };
  const app::DpRunResult r = app::run_dp_worker(c, cb);
  ASSERT_TRUE(r.leader);
  ASSERT_EQ(r.train_losses.size(), 4u);
  EXPECT_EQ(steps_seen, (std::vector<int64_t>{1, 2, 3, 4}));

  at::manual_seed(int64_t(c.seed));
  auto model = make_model(c.model, app::language_model_options(c.shape));
  app::DataOptions d = c.data;
  d.text = true;
  d.seq_len = c.shape.seq_len;
  d.seed = c.seed;
  const app::Batch b = app::TrainingData::open(d)->train_batch(0, c.batch);
  const at::Tensor out = model->forward(b.inputs);
  const double loss = fused_cross_entropy(out.reshape({-1, out.size(-1)}), b.labels.reshape({-1})).item<double>();
  EXPECT_NEAR(r.train_losses[0], loss, 1e-5 * loss);  // the report is the fp32 mean over ranks
  EXPECT_TRUE(std::isfinite(r.evaluation));
  const nlohmann::json j = app::to_json(c, r);
  for (const char* key : {"model", "optimizer", "workers", "train_losses", "val_loss", "bytes_total"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

// Saved after 2 of 4 steps and resumed, a run ends as the straight run does.
TEST(DpRun, ResumesBitForBit) {
  app::DpRunConfig straight = small_dp();
  const app::DpRunResult whole = app::run_dp_worker(straight);
  app::DpRunConfig first = small_dp();
  first.steps = 2;
  first.lr_schedule = app::LrSchedule::kConstant;
  straight.lr_schedule = app::LrSchedule::kConstant;
  straight.group = one_rank();
  const app::DpRunResult reference = app::run_dp_worker(straight);
  first.save = fresh_dir("dp");
  app::run_dp_worker(first);
  app::DpRunConfig rest = straight;
  rest.resume = first.save;
  rest.group = one_rank();
  const app::DpRunResult resumed = app::run_dp_worker(rest);
  EXPECT_EQ(resumed.start.first_step, 2);
  ASSERT_EQ(resumed.train_losses.size(), 2u);
  EXPECT_EQ(resumed.train_losses[0], reference.train_losses[2]);
  EXPECT_EQ(resumed.train_losses[1], reference.train_losses[3]);
  EXPECT_NE(whole.train_losses[3], reference.train_losses[3]) << "the schedule shapes the run";
  files::remove_all(first.save);
}

TEST(DpRun, RefusesBadSettingsBeforeFormingTheGroup) {
  app::DpRunConfig c = small_dp();
  c.data.set = app::DataSet::kFashionMnist;  // images, for a language model
  EXPECT_THROW(app::run_dp_worker(c), InvalidInput);
  c = small_dp();
  c.lr = 0;
  EXPECT_THROW(app::run_dp_worker(c), InvalidInput);
  c = small_dp();
  c.warmup_fraction = 2;
  EXPECT_THROW(c.validate(), InvalidInput);
}

// One stage: every step reported on rank 0, a validation loss, and the
// reports of a pipeline with no links.
TEST(PipelineRun, OneStageTrainsValidatesAndReports) {
  const app::PipelineRunConfig c = small_pipeline();
  int starts = 0;
  std::vector<double> seen;
  app::PipelineCallbacks cb;
  cb.on_start = [&](const app::PipelineStart& s) {
    ++starts;
    EXPECT_EQ(s.bounds.front(), 0);
    EXPECT_EQ(s.steps, 4);
  };
  cb.on_step = [&](const app::StepProgress& p) { seen.push_back(p.loss); };
  const app::PipelineRunResult r = app::run_pipeline_rank(c, cb);
  ASSERT_TRUE(r.leader);
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(seen, r.losses);
  ASSERT_EQ(r.losses.size(), 4u);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_TRUE(std::isfinite(r.val_loss) && r.val_loss > 0);
  EXPECT_TRUE(r.links.empty());
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_GT(r.stages[0].parameters, 0);
  const nlohmann::json j = app::to_json(c, r);
  EXPECT_EQ(j["train_losses"].size(), 4u);
  EXPECT_EQ(j["optimizer"], "adamw");
}

// --save after 2 steps, then --resume to 4: the losses of the straight run.
TEST(PipelineRun, ResumesBitForBit) {
  const app::PipelineRunResult straight = app::run_pipeline_rank(small_pipeline());
  app::PipelineRunConfig first = small_pipeline();
  first.steps = 2;
  first.save = fresh_dir("pipeline");
  app::run_pipeline_rank(first);
  app::PipelineRunConfig rest = small_pipeline();
  rest.init = first.save;
  rest.resume = true;
  const app::PipelineRunResult resumed = app::run_pipeline_rank(rest);
  EXPECT_EQ(resumed.start.first_step, 2);
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], straight.losses[2]);
  EXPECT_EQ(resumed.losses[1], straight.losses[3]);
  EXPECT_EQ(resumed.val_loss, straight.val_loss);
  // One flipped byte in either file of the checkpoint is refused, naming it.
  for (const std::string name : {"optimizer-stage0of1.pt", "stage0of1.pt"}) {
    const std::string file = first.save + "/" + name;
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::string damaged = bytes;
    damaged[damaged.size() / 3] ^= 0x01;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << damaged;
    app::PipelineRunConfig again = small_pipeline();
    again.init = first.save;
    again.resume = true;
    try {
      app::run_pipeline_rank(again);
      ADD_FAILURE() << "a damaged " << name << " was resumed from";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  }
  // Nothing left to do is refused.
  app::PipelineRunConfig done = small_pipeline();
  done.init = first.save;
  done.resume = true;
  done.steps = 2;
  EXPECT_THROW(app::run_pipeline_rank(done), InvalidInput);
  files::remove_all(first.save);
}

// A diverged run stops at the step, naming it, unless told to go on.
TEST(RunProgress, ANonFiniteLossStopsTheRun) {
  EXPECT_NO_THROW(app::check_finite_loss(2.5, 3, 0, false));
  try {
    app::check_finite_loss(std::nan(""), 7, 2, false);
    ADD_FAILURE() << "a NaN loss went on";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(app::check_finite_loss(INFINITY, 1, 0, false), Error);
  EXPECT_NO_THROW(app::check_finite_loss(std::nan(""), 1, 0, true));
  // In a run: a learning rate that blows the weights up ends it with an error.
  app::DpRunConfig c = small_dp();
  c.lr = 1e30;
  c.steps = 8;
  EXPECT_THROW(app::run_dp_worker(c), Error);
}

TEST(PipelineRun, RefusesBadSettings) {
  app::PipelineRunConfig c = small_pipeline();
  c.epochs = 1;  // and steps
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.save_every = 1;  // without save
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.pipeline.model = "resnet18";
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.data.set = app::DataSet::kFashionMnist;
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.pipeline.stages = 4;  // 1 block: 3 pieces
  EXPECT_THROW(c.validate(), InvalidInput);
  c.pipeline.stages = 3;
  EXPECT_NO_THROW(c.validate());
}
