// app::run_dp_worker and app::run_pipeline_rank called directly, in this
// process, as a group of one, and as several ranks of app_run_peer_main.cpp
// (the other multi-process runs are test_pipeline's, test_data_parallel's
// and scripts/test.sh's).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "actkit/app/evaluation.h"
#include "actkit/app/checkpoint_folder.h"
#include "actkit/app/dp_run.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/measure/level_memory.h"
#include "actkit/measure/memory_floor.h"
#include "actkit/app/pipeline_run.h"
#include "actkit/app/train_step.h"
#include "actkit/converters/convert.h"
#include "actkit/converters/safetensors.h"
#include "actkit/models/zoo.h"
#include "actkit/comm/comm_error.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "peer_ranks.h"
#include "test_paths.h"
#include "app/small_run.h"

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
  make_small_text_run(c.run, {1, 32, 2, 16, 0.0}, 64);
  c.optimizer = optim::parse_optimizer_choice("adam");
  c.batch = 4;
  c.run.steps = 4;
  c.group = one_rank();
  return c;
}

app::PipelineRunConfig small_pipeline() {
  app::PipelineRunConfig c;
  pipeline::PipelineConfig& p = c.pipeline;
  c.run.model.shape = {1, 32, 2, 16, 0.0};
  p.stages = 1;
  p.micro_batches = 2;
  p.micro_batch_size = 2;
  c.run.data.set = DataSet::kSynthetic;
  c.run.data.train_limit = 32;
  c.validation_batches = 2;
  c.run.steps = 4;
  c.group = one_rank();
  return c;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = files::temp_directory() + "/actkit-app-runs-" + name;
  files::remove_all(dir);
  return dir;
}

}  // namespace

// The accumulated gradient is the whole batch's mean gradient (Adam and
// LAMB would hide a wrong scale; the gradients themselves do not), and the
// reported loss its mean loss.
TEST(TrainStep, MicroBatchesAccumulateTheBatchsMeanGradient) {
  at::manual_seed(3);
  auto model = make_model("gpt2", app::training_model_options("gpt2", {1, 32, 2, 16, 0.0}));
  const ConvertResult converted = convert(*model, "L0");
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));  // lr 0: the weights stay
  const at::Tensor inputs = at::randint(0, 256, {8, 16}, at::kLong);
  const at::Tensor labels = at::randint(0, 256, {8, 16}, at::kLong);
  auto grads = [&] {
    std::vector<at::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const double whole_loss = app::train_step(*model, *converted.controller, sgd, inputs, labels).item<double>();
  const std::vector<at::Tensor> whole = grads();
  for (int64_t k : {2, 4, 8}) {
    const double loss = app::train_step(*model, *converted.controller, sgd, inputs, labels, {}, k).item<double>();
    EXPECT_NEAR(loss, whole_loss, 1e-5 * whole_loss) << k;
    const std::vector<at::Tensor> split = grads();
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_TRUE(at::allclose(split[i], whole[i], 1e-4, 1e-6)) << k << " parameter " << i;
    }
  }
  EXPECT_THROW(app::train_step(*model, *converted.controller, sgd, inputs, labels, {}, 3), InvalidInput);
  EXPECT_THROW(app::train_step(*model, *converted.controller, sgd, inputs, labels, {}, 0), InvalidInput);
}

// Gradient accumulation: a step of 2 micro-batches of 4 (or 4 of 2) sees
// the 8 examples a step of one batch of 8 sees, and averages the same
// gradient, so the runs agree up to the order of the sums; the step count
// of an epoch follows the global batch.
TEST(DpRun, AccumulatedMicroBatchesTrainAsOneBatch) {
  app::DpRunConfig whole = small_dp();
  whole.batch = 8;
  whole.run.steps = 5;
  const app::DpRunResult a = app::run_dp_worker(whole, {});
  for (int64_t k : {2, 4}) {
    app::DpRunConfig split = whole;
    split.batch = 8 / k;
    split.accumulate = k;
    split.group = one_rank();
    const app::DpRunResult b = app::run_dp_worker(split, {});
    ASSERT_EQ(a.train_losses.size(), b.train_losses.size());
    for (size_t i = 0; i < a.train_losses.size(); ++i) {
      EXPECT_NEAR(a.train_losses[i], b.train_losses[i], 1e-4 * std::abs(a.train_losses[i])) << k << " step " << i;
    }
    // A plain run of micro-batches alone differs: the accumulation is what matches.
    app::DpRunConfig alone = split;
    alone.accumulate = 1;
    alone.group = one_rank();
    EXPECT_GT(std::abs(app::run_dp_worker(alone, {}).train_losses.back() - a.train_losses.back()), 1e-3);
  }
  // A global batch beyond the training set would repeat examples within a step.
  app::DpRunConfig too_large = whole;
  too_large.accumulate = 16;  // 8 x 16 of 64 examples
  too_large.group = one_rank();
  EXPECT_THROW(app::run_dp_worker(too_large, {}), InvalidInput);
  app::DpRunConfig bad = whole;
  bad.accumulate = 0;
  EXPECT_THROW(bad.validate(), InvalidInput);
  bad.accumulate = app::kMaxAccumulate + 1;
  EXPECT_THROW(bad.validate(), InvalidInput);
}

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

  at::manual_seed(int64_t(c.run.seed));
  auto model = make_model(c.run.model.zoo, app::language_model_options(c.run.model.shape));
  const DataOptions d = app::data_options(c.run);
  const Batch b = TrainingData::open(d)->train_batch(0, c.batch);
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
  straight.run.model.shape.dropout = 0.1;  // each step draws: a resumed run draws the same
  const app::DpRunResult whole = app::run_dp_worker(straight);
  app::DpRunConfig first = straight;
  first.run.steps = 2;
  first.run.lr_plan.schedule = app::LrSchedule::kConstant;
  straight.run.lr_plan.schedule = app::LrSchedule::kConstant;
  straight.group = one_rank();
  const app::DpRunResult reference = app::run_dp_worker(straight);
  first.run.checkpoint.save = fresh_dir("dp");
  first.run.checkpoint.save_every = 1;  // step 1 committed, then replaced by step 2's
  app::run_dp_worker(first);
  EXPECT_EQ(app::committed_folder(first.run.checkpoint.save), app::step_folder(first.run.checkpoint.save, 2));
  app::DpRunConfig rest = straight;
  rest.run.checkpoint.resume = first.run.checkpoint.save;
  rest.group = one_rank();
  const app::DpRunResult resumed = app::run_dp_worker(rest);
  EXPECT_EQ(resumed.start.first_step, 2);
  ASSERT_EQ(resumed.train_losses.size(), 2u);
  EXPECT_EQ(resumed.train_losses[0], reference.train_losses[2]);
  EXPECT_EQ(resumed.train_losses[1], reference.train_losses[3]);
  EXPECT_NE(whole.train_losses[3], reference.train_losses[3]) << "the schedule shapes the run";
  // Another micro-batching (here the same 4 examples a rank, as 2 x 2), lr,
  // seed, ... would go on as another run: refused, naming what differs, the
  // checkpoint left as it was.
  app::DpRunConfig other = rest;
  other.batch = 2;
  other.accumulate = 2;
  other.group = one_rank();
  try {
    app::run_dp_worker(other);
    ADD_FAILURE() << "a resume with another batch was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("saved batch=4 but now batch=2 x 2"), std::string::npos) << e.what();
  }
  rest.group = one_rank();
  EXPECT_EQ(app::run_dp_worker(rest).train_losses[1], reference.train_losses[3]);
  files::remove_all(first.run.checkpoint.save);
}

TEST(DpRun, RefusesBadSettingsBeforeFormingTheGroup) {
  app::DpRunConfig c = small_dp();
  c.run.data.set = DataSet::kFashionMnist;  // images, for a language model
  EXPECT_THROW(app::run_dp_worker(c), InvalidInput);
  c = small_dp();
  c.run.lr = 0.0;
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

// --eval-every in dp and the pipeline: the steps and the final evaluation
// are the run's without it, bit for bit; the list ends with the final one.
TEST(RunEvaluations, EvaluatingDuringTheRunChangesNoStep) {
  auto steps_of = [](const std::vector<app::Evaluation>& list) {
    std::vector<int64_t> steps;
    for (const app::Evaluation& e : list) steps.push_back(e.step);
    return steps;
  };
  // With dropout: an evaluation that left the model in eval mode, or drew
  // from the generator, would change the steps after it.
  {
    app::DpRunConfig c = small_dp();
    c.run.model.shape.dropout = 0.1;
    const app::DpRunResult plain = app::run_dp_worker(c);
    c.run.eval_every = 2;
    c.group = one_rank();
    const app::DpRunResult often = app::run_dp_worker(c);
    EXPECT_EQ(often.train_losses, plain.train_losses);
    EXPECT_EQ(often.evaluation, plain.evaluation);
    EXPECT_EQ(steps_of(often.evaluations), (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(steps_of(plain.evaluations), (std::vector<int64_t>{4}));
    EXPECT_EQ(often.evaluations.back().value, often.evaluation);
    EXPECT_EQ(app::to_json(c, often)["evaluations"].size(), 2u);
  }
  app::PipelineRunConfig c = small_pipeline();
  c.run.model.shape.dropout = 0.1;
  const app::PipelineRunResult plain = app::run_pipeline_rank(c);
  c.run.eval_every = 1;
  c.group = one_rank();
  const app::PipelineRunResult often = app::run_pipeline_rank(c);
  EXPECT_EQ(often.losses, plain.losses);
  EXPECT_EQ(often.val_loss, plain.val_loss);
  EXPECT_EQ(steps_of(often.evaluations), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(often.evaluations.back().value, often.val_loss);
  EXPECT_LT(often.evaluations[0].train_seconds, often.evaluations[3].train_seconds);
  EXPECT_EQ(app::to_json(c, often)["evaluations"][1]["step"], 2);
}

// --save after 2 steps, then --resume to 4: the losses of the straight run.
TEST(PipelineRun, ResumesBitForBit) {
  const app::PipelineRunResult straight = app::run_pipeline_rank(small_pipeline());
  app::PipelineRunConfig first = small_pipeline();
  first.run.steps = 2;
  first.run.checkpoint.save = fresh_dir("pipeline");
  app::run_pipeline_rank(first);
  app::PipelineRunConfig rest = small_pipeline();
  rest.run.checkpoint.resume = first.run.checkpoint.save;
  const app::PipelineRunResult resumed = app::run_pipeline_rank(rest);
  EXPECT_EQ(resumed.start.first_step, 2);
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], straight.losses[2]);
  EXPECT_EQ(resumed.losses[1], straight.losses[3]);
  EXPECT_EQ(resumed.val_loss, straight.val_loss);
  // The save went to its step's folder and was committed; the older
  // folders are gone.
  EXPECT_EQ(app::committed_folder(first.run.checkpoint.save), first.run.checkpoint.save + "/step-2");
  // One flipped byte in either file of the checkpoint is refused, naming it.
  for (const std::string name : {"optimizer-stage0of1.pt", "stage0of1.pt"}) {
    const std::string file = first.run.checkpoint.save + "/step-2/" + name;
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::string damaged = bytes;
    damaged[damaged.size() / 3] ^= 0x01;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << damaged;
    app::PipelineRunConfig again = small_pipeline();
    again.run.checkpoint.resume = first.run.checkpoint.save;
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
  done.run.checkpoint.resume = first.run.checkpoint.save;
  done.run.steps = 2;
  EXPECT_THROW(app::run_pipeline_rank(done), InvalidInput);
  files::remove_all(first.run.checkpoint.save);
}

// A pipeline started from a Hugging Face folder resumes from its --save
// folder alone (the checkpoint records where it started), bit for bit; a
// folder of another model given with --init, or a recorded folder gone, is
// refused before anything runs.
TEST(PipelineRun, ResumesARunStartedFromAHuggingFaceFolder) {
  const std::string dir = fresh_dir("hf-start");
  const std::string hf = dir + "/model";
  files::create_directories(hf);
  const std::string config = R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "activation_function": "gelu_new", "vocab_size": 1504, "n_positions": 16, "n_embd": 16, "n_layer": 1,
    "n_head": 2, "n_inner": null, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true})";
  files::write_file_atomic(hf + "/config.json", config.data(), config.size());
  const HfModelInfo info = read_hf_config(hf);
  torch::manual_seed(3);
  std::map<std::string, at::Tensor> zoo;
  for (const auto& p : make_model(info.zoo_name, info.options)->named_parameters()) zoo[p.key()] = p.value().detach();
  write_safetensors(hf + "/model.safetensors", hf_named(info, zoo));
  files::copy_file(std::string(ACTKIT_TOKENIZER_FIXTURES) + "/gpt2/tokenizer.json", hf + "/tokenizer.json");
  auto from_folder = [&] {
    app::PipelineRunConfig c = small_pipeline();
    c.run.model.init = hf;  // its model and shape
    return c;
  };
  const app::PipelineRunResult straight = app::run_pipeline_rank(from_folder());
  app::PipelineRunConfig first = from_folder();
  first.run.steps = 2;
  first.run.checkpoint.save = dir + "/ckpt";
  app::run_pipeline_rank(first);
  app::PipelineRunConfig rest = from_folder();
  rest.run.model.init.clear();
  rest.run.checkpoint.resume = first.run.checkpoint.save;
  app::resolve_pipeline_model(rest);
  EXPECT_EQ(rest.run.model.init.substr(rest.run.model.init.size() - 6), "/model");
  const app::PipelineRunResult resumed = app::run_pipeline_rank(rest);
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], straight.losses[2]);
  EXPECT_EQ(resumed.losses[1], straight.losses[3]);
  // Another model's folder: refused, naming both.
  const std::string other = dir + "/other";
  files::create_directories(other);
  std::string changed = config;
  changed.replace(changed.find("\"n_layer\": 1"), 12, "\"n_layer\": 2");
  files::write_file_atomic(other + "/config.json", changed.data(), changed.size());
  app::PipelineRunConfig wrong = from_folder();
  wrong.run.model.init = other;
  wrong.run.checkpoint.resume = first.run.checkpoint.save;
  EXPECT_THROW(app::resolve_pipeline_model(wrong), InvalidInput);
  // The recorded folder gone: refused, naming it.
  files::rename(hf, dir + "/moved");
  app::PipelineRunConfig gone = from_folder();
  gone.run.model.init.clear();
  gone.run.checkpoint.resume = first.run.checkpoint.save;
  try {
    app::resolve_pipeline_model(gone);
    ADD_FAILURE() << "resumed without its model's folder";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("/model"), std::string::npos) << e.what();
  }
  // A checkpoint that did not start from a folder refuses one.
  app::PipelineRunConfig plain = small_pipeline();
  plain.run.steps = 1;
  plain.run.checkpoint.save = dir + "/plain";
  app::run_pipeline_rank(plain);
  app::PipelineRunConfig mixed = small_pipeline();
  mixed.run.model.init = dir + "/moved";
  mixed.run.checkpoint.resume = plain.run.checkpoint.save;
  EXPECT_THROW(app::resolve_pipeline_model(mixed), InvalidInput);
  files::remove_all(dir);
}

// What a step holds at any level is checked against the machine before
// anything is built: the input and the output with its gradient.
TEST(MemoryFloor, ABatchLargerThanTheMachineIsRefusedNamingTheFigures) {
  ModelOptions lm;
  lm.vocab_size = 100;
  EXPECT_DOUBLE_EQ(step_memory_floor("gpt2", lm, 2, 8), 2 * 8 * 8 + 2.0 * 2 * 8 * 100 * 4);
  ModelOptions images;
  images.in_channels = 3;
  images.num_classes = 10;
  EXPECT_DOUBLE_EQ(step_memory_floor("resnet18", images, 4, 32), 4.0 * 3 * 32 * 32 * 4 + 2.0 * 4 * 10 * 4);
  ASSERT_GT(machine_memory_bytes(), 0);
  EXPECT_NO_THROW(check_fits_machine("--batch 8", 1e6));
  try {
    check_fits_machine("--batch 99", 1e18);
    ADD_FAILURE() << "an exabyte fitted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("--batch 99"), std::string::npos) << e.what();
  }
  LevelMemoryConfig huge;
  huge.model = "resnet18";
  huge.batch = 1000000000;
  huge.length = 224;
  EXPECT_THROW(measure_level_memory(huge), InvalidInput);
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
  c.run.lr = 1e30;
  c.run.steps = 8;
  EXPECT_THROW(app::run_dp_worker(c), Error);
}

// The rate rises linearly over the warm-up to the peak, then the schedule
// runs over the steps left: cosine ends near 0, constant stays at the peak.
TEST(LrSchedule, WarmsUpLinearlyThenRunsTheScheduleOverTheRest) {
  const app::LrPlan cosine{app::LrSchedule::kCosine, 4};
  EXPECT_DOUBLE_EQ(app::scheduled_lr(cosine, 1.0, 0, 104), 0.25);
  EXPECT_DOUBLE_EQ(app::scheduled_lr(cosine, 1.0, 3, 104), 1.0);
  EXPECT_DOUBLE_EQ(app::scheduled_lr(cosine, 1.0, 4, 104), 1.0);     // the schedule's first step: the peak
  EXPECT_NEAR(app::scheduled_lr(cosine, 1.0, 54, 104), 0.5, 1e-12);  // half way through the 100 after it
  EXPECT_LT(app::scheduled_lr(cosine, 1.0, 103, 104), 1e-3);
  const app::LrPlan constant{app::LrSchedule::kConstant, 2};
  EXPECT_DOUBLE_EQ(app::scheduled_lr(constant, 3.0, 0, 10), 1.5);
  EXPECT_DOUBLE_EQ(app::scheduled_lr(constant, 3.0, 9, 10), 3.0);
  EXPECT_DOUBLE_EQ(app::scheduled_lr(app::LrPlan{}, 1.0, 0, 10), 1.0);  // no warm-up: the peak at once
  EXPECT_NO_THROW(app::check_lr_plan(cosine, 5, "dp"));
  EXPECT_THROW(app::check_lr_plan(cosine, 4, "dp"), InvalidInput);  // the whole run warming up
  EXPECT_THROW(app::check_lr_plan(app::LrPlan{app::LrSchedule::kCosine, -1}, 4, "dp"), InvalidInput);
}

TEST(PipelineRun, RefusesBadSettings) {
  app::PipelineRunConfig c = small_pipeline();
  c.run.epochs = 0;  // a run of no length (--steps, when given, counts instead)
  c.run.steps = 0;
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.run.checkpoint.save_every = 1;  // without save
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.run.model.zoo = "resnet18";
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.run.data.set = DataSet::kFashionMnist;
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.pipeline.stages = 4;  // 1 block: 3 pieces
  EXPECT_THROW(c.validate(), InvalidInput);
  c.pipeline.stages = 3;
  EXPECT_NO_THROW(c.validate());
  // Counts bounded before anything is allocated (a billion micro-batches
  // took 1.7 GB per rank before), and a vocabulary the byte text cannot use
  // (an index error on the first batch before).
  c = small_pipeline();
  c.pipeline.micro_batches = pipeline::kMaxMicroBatches + 1;
  EXPECT_THROW(c.validate(), InvalidInput);
  c = small_pipeline();
  c.run.data.set = DataSet::kFortunes;
  c.run.model.shape.vocab = 10;
  EXPECT_THROW(c.validate(), InvalidInput);
  c.run.model.shape.vocab = 256;
  EXPECT_NO_THROW(c.validate());
}

// An evaluation cut into batches and put back together gives evaluate()'s
// result bit for bit, whoever scored which batch: classifiers (short last
// batch) and language models.
TEST(Evaluation, ThePlanAddsUpToTheWholeEvaluation) {
  for (const bool text : {false, true}) {
    DataOptions d;
    d.set = DataSet::kSynthetic;
    d.text = text;
    d.seq_len = 16;
    d.train_limit = 16;
    const auto data = TrainingData::open(d);
    at::manual_seed(3);
    const std::string model_name = text ? "gpt2" : "vit";
    ModelOptions o = app::training_model_options(model_name, {1, 32, 2, 16, 0.0});
    o.layers = 1;
    o.hidden = 32;
    o.heads = 2;
    auto model = make_model(model_name, o);
    const app::EvaluationPlan plan = app::evaluation_plan(*data, 4);
    EXPECT_EQ(plan.batches, text ? app::kValidationBatches : 3) << "1024 images: 500, 500, 24";
    std::vector<double> scores(size_t(plan.batches), 0.0);
    {
      torch::NoGradGuard no_grad;
      model->eval();
      for (int64_t i = plan.batches - 1; i >= 0; --i) {
        scores[size_t(i)] = app::evaluate_batch(*model, *data, plan, i, at::kCPU);
      }
      model->train();
    }
    EXPECT_EQ(app::evaluation_score(plan, scores), app::evaluate(*model, *data, 4, at::kCPU)) << model_name;
    EXPECT_THROW(app::evaluate_batch(*model, *data, plan, plan.batches, at::kCPU), InvalidInput);
    EXPECT_THROW(app::evaluation_score(plan, {1.0}), InvalidInput);
  }
}

// A failure after training names the part that failed, as the same type.
TEST(RunProgress, AFailureAfterTrainingNamesItsPhase) {
  try {
    app::in_phase("after 32 steps: the evaluation", [] { throw CommError("rank 2 is gone", 2); });
    ADD_FAILURE() << "nothing thrown";
  } catch (const CommError& e) {
    EXPECT_EQ(e.peer(), 2);
    EXPECT_EQ(std::string(e.what()), "after 32 steps: the evaluation: rank 2 is gone");
  }
  EXPECT_THROW(app::in_phase("saving", [] { throw IoError("disk full", 28); }), IoError);
  EXPECT_THROW(app::in_phase("x", [] { TORCH_CHECK(false, "inside LibTorch"); }), Error);
  EXPECT_EQ(app::in_phase("x", [] { return 7; }), 7);
}

// The ranks share the evaluation at the end of a run: with every batch made
// slow (DELAY ms each), a run whose evaluation outlasts the 2 s timeout many
// times over still finishes with its result, on every rank at once; the
// same slow batches on rank 0 alone (one rank evaluating while the others
// wait, as before) run out the timeout.
namespace {

constexpr int kTimeoutS = 2;

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool all_succeeded(const std::vector<ProcessResult>& results) {
  for (const auto& r : results) {
    if (!r.succeeded()) return false;
  }
  return true;
}

}  // namespace

TEST(SharedEvaluation, DpFinishesAnEvaluationLongerThanTheTimeout) {
  const std::string out = fresh_dir("dp-eval");
  // 32 batches of 150 ms: 4.8 s for one rank alone, 2.4 s each for two.
  const auto shared = run_ranks(ACTKIT_APP_RUN_PEER, 2, {"dp-text", "150", "all", out}, kTimeoutS);
  EXPECT_TRUE(all_succeeded(shared));
  EXPECT_FALSE(read_line(out).empty());
  const auto alone = run_ranks(ACTKIT_APP_RUN_PEER, 2, {"dp-text", "300", "0", out + ".alone"}, kTimeoutS);
  EXPECT_FALSE(all_succeeded(alone)) << "the control: rank 0 evaluating alone runs out the timeout";
  files::remove_all(out);
  files::remove_all(out + ".alone");
}

TEST(SharedEvaluation, PipelineReplicasShareTheValidation) {
  const std::string out = fresh_dir("pipeline-eval");
  // 16 batches of 300 ms: 4.8 s for one replica, 2.4 s each for two.
  const auto shared = run_ranks(ACTKIT_APP_RUN_PEER, 2, {"pipeline", "300", "all", out}, kTimeoutS);
  EXPECT_TRUE(all_succeeded(shared));
  EXPECT_GT(std::stod(read_line(out)), 0);
  const auto alone = run_ranks(ACTKIT_APP_RUN_PEER, 2, {"pipeline", "600", "0", out + ".alone"}, kTimeoutS);
  EXPECT_FALSE(all_succeeded(alone)) << "the control: replica 0 validating alone runs out the timeout";
  files::remove_all(out);
  files::remove_all(out + ".alone");
}

// Two workers evaluate a BatchNorm model together: the result is what the
// saved model.pt gives evaluated in one process, bit for bit (every rank
// evaluates with rank 0's running statistics).
TEST(SharedEvaluation, DpEqualsTheSavedModelEvaluatedInOneProcess) {
  const std::string out = fresh_dir("dp-images");
  // ResNet-18 in two processes took about 50 s on 2 busy cores (the whole
  // 1,024-image split, before the peer's validation limit): the limit is
  // for a hang, not a measure (it ran out once beside a benchmark).
  const auto results = run_ranks(ACTKIT_APP_RUN_PEER, 2, {"dp-images", "0", "all", out}, 240);
  ASSERT_TRUE(all_succeeded(results));
  std::istringstream line(read_line(out));
  std::string shared, alone;
  line >> shared >> alone;
  EXPECT_FALSE(shared.empty());
  EXPECT_EQ(shared, alone);
  files::remove_all(out);
  files::remove_all(out + ".ckpt");
}

// A checkpoint folder is read at its commit: a save that never finished
// (a step folder without DIR/latest pointing at it) is not seen, and a
// damaged pointer is a FormatError naming it.
TEST(CheckpointFolder, ReadersSeeOnlyTheLastCommit) {
  const std::string dir = fresh_dir("commit");
  app::begin_step_folder(dir, 4);
  EXPECT_EQ(app::committed_folder(dir), dir) << "nothing committed: the folder as it is";
  app::commit_checkpoint(dir, 4);
  EXPECT_EQ(app::committed_folder(dir), dir + "/step-4");
  app::begin_step_folder(dir, 8);  // a save killed before its commit
  EXPECT_EQ(app::committed_folder(dir), dir + "/step-4");
  app::commit_checkpoint(dir, 8);
  EXPECT_EQ(app::committed_folder(dir), dir + "/step-8");
  EXPECT_FALSE(files::exists(dir + "/step-4")) << "older steps go once the newer is committed";
  for (const std::string bad : {std::string("step-9\n"), std::string("../etc\n"), std::string(100, 'x')}) {
    std::ofstream(dir + "/latest", std::ios::trunc) << bad;
    EXPECT_THROW(app::committed_folder(dir), FormatError) << bad;
  }
  EXPECT_THROW(app::step_folder(dir, -1), InvalidInput);
  files::remove_all(dir);
}

// ACTkit saves only into a folder that is new, empty or its own, and a
// commit removes only the step folders it wrote: a user's step-1/ with
// their files in it, a link named step-2, stay; the leftovers of our
// killed writes go.
TEST(CheckpointFolder, NeverTouchesWhatACTkitDidNotWrite) {
  const std::string dir = fresh_dir("owned");
  app::check_checkpoint_folder(dir + "/new", "--save");  // missing: fine, and still missing
  EXPECT_FALSE(files::exists(dir + "/new"));
  files::create_directories(dir + "/step-1");
  std::ofstream(dir + "/step-1/README.md") << "mine";
  try {
    app::check_checkpoint_folder(dir, "--save");
    ADD_FAILURE() << "a folder of someone else's files was taken";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("step-1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(app::claim_checkpoint_folder(dir, "--save"), InvalidInput);
  EXPECT_FALSE(files::exists(dir + "/.actkit-checkpoints")) << "a refused folder is not marked";
  // An empty folder (or one holding only our lock) becomes ours.
  const std::string ours = dir + "/ours";
  { files::FolderLock lock(ours); }
  std::ofstream(ours + "/latest.tmp.123.0") << "step-";  // a killed commit's temporary file
  EXPECT_THROW(app::check_checkpoint_folder(ours, "--save"), InvalidInput) << "not ours before a claim";
  files::remove(ours + "/latest.tmp.123.0");
  app::claim_checkpoint_folder(ours, "--save");
  std::ofstream(ours + "/latest.tmp.123.0") << "step-";
  app::claim_checkpoint_folder(ours, "--save");  // a second run of ours: fine, the leftover goes
  EXPECT_FALSE(files::exists(ours + "/latest.tmp.123.0"));
  app::begin_step_folder(ours, 1);
  app::commit_checkpoint(ours, 1);
  files::create_directories(ours + "/step-2/sub");  // the user's, in our folder
  std::ofstream(ours + "/step-2/sub/data.csv") << "1,2";
  ASSERT_EQ(::symlink(dir.c_str(), (ours + "/step-3").c_str()), 0);
  app::begin_step_folder(ours, 4);
  app::commit_checkpoint(ours, 4);
  EXPECT_FALSE(files::exists(ours + "/step-1")) << "our older step goes";
  EXPECT_TRUE(files::is_regular_file(ours + "/step-2/sub/data.csv"));
  EXPECT_TRUE(files::is_regular_file(dir + "/step-1/README.md")) << "a link is never followed";
  EXPECT_EQ(app::committed_folder(ours), ours + "/step-4");
  // Another run holding the folder is named, to a writer and to a reader.
  {
    files::FolderLock held(ours);
    const pid_t child = ::fork();
    if (child == 0) {
      int code = 1;
      try {
        app::check_checkpoint_folder(ours, "--save");
      } catch (const IoError& e) {
        code = std::string(e.what()).find(std::to_string(::getppid())) != std::string::npos ? 0 : 2;
      } catch (...) {
      }
      ::_exit(code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the holder's process id was not named";
  }
  EXPECT_NO_THROW(files::FolderLock::check_free(ours));
  files::remove_all(dir);
}
