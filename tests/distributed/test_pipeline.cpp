// pipeline/: schedules, the stage split, boundary payloads, and whole
// pipelines of 2 and 4 real processes against one process training the
// same model on the same micro-batches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <thread>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_paths.h"  // generated: where the test programs and fixtures are
#include "actkit/process/process.h"
#include "actkit/comm/group_config.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/pipeline/boundary_codec.h"
#include "actkit/pipeline/schedule.h"
#include "actkit/pipeline/stage_reports.h"
#include "actkit/pipeline/stage_split.h"
#include "actkit/comm/communicator.h"
#include "peer_ranks.h"
#include "pipeline_test_model.h"

namespace actkit {
namespace {

using pipeline::Schedule;
using pipeline::StageOp;

TEST(PipelineSchedule, EveryMicroBatchOnceForwardThenBackward) {
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B}) {
    for (int stages : {1, 2, 4}) {
      for (int m : {1, 3, 8}) {
        for (int stage = 0; stage < stages; ++stage) {
          const auto ops = pipeline::stage_ops(s, stage, stages, m, s == Schedule::k1F1B && m == 8 ? stages + 2 : 0);
          ASSERT_EQ(ops.size(), size_t(2 * m));
          std::vector<int> forward_at(m, -1), backward_at(m, -1);
          for (size_t i = 0; i < ops.size(); ++i) {
            auto& at = ops[i].kind == StageOp::kForward ? forward_at : backward_at;
            ASSERT_EQ(at[ops[i].micro_batch], -1);
            at[ops[i].micro_batch] = int(i);
          }
          for (int j = 0; j < m; ++j) {
            EXPECT_LT(forward_at[j], backward_at[j]);
            if (j > 0) EXPECT_LT(backward_at[j - 1], backward_at[j]);  // gradients leave in order
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostStagesMicroBatches) {
  const int stages = 4, m = 8;
  for (int stage = 0; stage < stages; ++stage) {
    EXPECT_EQ(pipeline::peak_in_flight(pipeline::stage_ops(Schedule::kGPipe, stage, stages, m)), m);
    EXPECT_EQ(pipeline::peak_in_flight(pipeline::stage_ops(Schedule::k1F1B, stage, stages, m)), stages - stage);
  }
  // More in flight: stage s holds up to in_flight - s.
  for (int stage = 0; stage < stages; ++stage) {
    EXPECT_EQ(pipeline::peak_in_flight(pipeline::stage_ops(Schedule::k1F1B, stage, stages, m, 6)), 6 - stage);
  }
  EXPECT_THROW(pipeline::stage_ops(Schedule::k1F1B, 4, 4, 8), InvalidInput);
  EXPECT_THROW(pipeline::stage_ops(Schedule::k1F1B, 0, 4, 8, 3), InvalidInput);
  EXPECT_THROW(pipeline::parse_schedule("interleaved"), InvalidInput);
  EXPECT_EQ(pipeline::parse_schedule("1F1B"), Schedule::k1F1B);
}

// `--data synthetic --train-limit` with replicas: share r of a step's
// micro-batches cycles through the pool's ids r, r + shares, ..., each once
// per epoch of the share, and an example has the same tokens wherever it is
// drawn (AQ-SGD keys m(ξ) by the id and must see the same sequence).
TEST(PipelineBatches, SharesAreFixedDisjointSetsVisitedOncePerEpoch) {
  const int64_t batch = 3, pool = 24;
  const int micro_batches = 2, shares = 2;
  pipeline::PipelineConfig c = test_pipeline_config(1);
  c.micro_batch_size = batch;
  c.seq_len = 8;
  c.seed = 5;
  TestBatches t = test_batches(c, pool, micro_batches, shares);
  pipeline::BatchSource& data = *t.batches;
  const int64_t share_size = pool / shares;
  const int64_t steps_per_epoch = share_size / (micro_batches * batch);  // 2
  std::map<int64_t, at::Tensor> tokens;
  std::vector<std::set<int64_t>> first_epoch(shares);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::multiset<int64_t>> seen(shares);
    for (int64_t step = epoch * steps_per_epoch; step < (epoch + 1) * steps_per_epoch; ++step) {
      for (int index = 0; index < micro_batches * shares; ++index) {
        const pipeline::MicroBatch mb = data.train_batch(step, index);
        const int share = index / micro_batches;
        ASSERT_EQ(int64_t(mb.example_ids.size()), batch);
        for (int64_t row = 0; row < batch; ++row) {
          const int64_t id = mb.example_ids[size_t(row)];
          EXPECT_EQ(id % shares, share) << "step " << step << " micro-batch " << index;
          EXPECT_LT(id, pool);
          seen[size_t(share)].insert(id);
          const at::Tensor row_tokens = mb.inputs[row];
          auto [it, fresh] = tokens.emplace(id, row_tokens);
          if (!fresh) EXPECT_TRUE(at::equal(it->second, row_tokens)) << "example " << id;
        }
      }
    }
    for (int r = 0; r < shares; ++r) {
      const std::set<int64_t> distinct(seen[size_t(r)].begin(), seen[size_t(r)].end());
      EXPECT_EQ(int64_t(seen[size_t(r)].size()), share_size) << "share " << r;
      EXPECT_EQ(int64_t(distinct.size()), share_size) << "share " << r << ": an example twice in an epoch";
      if (epoch == 0) first_epoch[size_t(r)] = distinct;
      EXPECT_EQ(distinct, first_epoch[size_t(r)]) << "share " << r << " epoch " << epoch;
    }
  }
  EXPECT_THROW(data.train_batch(0, micro_batches * shares), InvalidInput);
  EXPECT_THROW(data.train_batch(-1, 0), InvalidInput);
  EXPECT_THROW(test_batches(c, 1, micro_batches, shares), InvalidInput);  // a pool of 1 for 2 shares
  // Without a pool: fresh ids, distinct across steps, micro-batches and shares.
  TestBatches fresh = test_batches(c, 0, 1024, 2);
  std::set<int64_t> ids;
  for (int64_t step = 0; step < 3; ++step) {
    for (int index : {0, 1, 1023, 1024, 2047}) {
      for (int64_t id : fresh.batches->train_batch(step, index).example_ids) EXPECT_TRUE(ids.insert(id).second) << id;
    }
  }
  EXPECT_THROW(fresh.batches->train_batch(0, -1), InvalidInput);
  EXPECT_THROW(fresh.batches->train_batch(0, 2048), InvalidInput);
  EXPECT_THROW(fresh.batches->train_batch(-1, 0), InvalidInput);
}

TEST(StageSplit, MinimizesTheLargestStage) {
  // embeddings, 6 equal blocks, a head: the blocks are spread so that no
  // stage carries more than it must.
  const std::vector<double> costs{5, 4, 4, 4, 4, 4, 4, 1};
  EXPECT_EQ(pipeline::balance_stages(costs, 1), (std::vector<int>{0, 8}));
  const auto two = pipeline::balance_stages(costs, 2);
  EXPECT_EQ(two, (std::vector<int>{0, 4, 8}));  // 17 | 13
  const auto four = pipeline::balance_stages(costs, 4);
  double worst = 0;
  for (int s = 0; s < 4; ++s) {
    double sum = 0;
    for (int i = four[s]; i < four[s + 1]; ++i) sum += costs[i];
    EXPECT_GT(four[s + 1], four[s]);
    worst = std::max(worst, sum);
  }
  EXPECT_EQ(worst, 9);  // 5+4 | 4+4 | 4+4 | 4+1
  EXPECT_THROW(pipeline::balance_stages(costs, 9), InvalidInput);
  EXPECT_THROW(pipeline::balance_stages({1, -1}, 1), InvalidInput);
}

TEST(ModelPieces, ChainComputesTheModelsForward) {
  const auto c = test_pipeline_config(1);
  torch::manual_seed(1);
  auto model = make_model("gpt2", c.model_options);
  model->eval();
  const at::Tensor tokens = at::randint(0, 256, {2, 16}, at::kLong);
  at::Tensor x = tokens;
  for (const auto& piece : model->pieces()) x = piece.forward(x);
  EXPECT_TRUE(at::equal(x, model->forward(tokens)));
  const auto pieces = model->pieces();
  EXPECT_EQ(pieces.front().name, "embeddings");
  EXPECT_EQ(pieces.back().name, "head");
  EXPECT_EQ(pieces.size(), size_t(c.model_options.layers + 2));
  EXPECT_THROW(make_model("resnet18")->pieces(), InvalidInput);
}

TEST(BoundaryPayload, RoundTripsAndNamesTheBoundaryWhenCorrupt) {
  const at::Tensor x = at::randn({2, 16, 64});
  for (const auto& [name, bits] : std::vector<std::pair<std::string, int>>{{"fp32", 0}, {"fp16", 0}, {"directq", 4}, {"tah", 4}}) {
    const auto codec = pipeline::parse_boundary_codec(name, bits);
    auto bytes = pipeline::encode_boundary(x, codec, 5);
    const at::Tensor y = pipeline::decode_boundary(bytes, "boundary 0->1", {2, 16, 64});
    EXPECT_EQ(y.sizes(), x.sizes()) << name;
    if (name == "fp32") EXPECT_TRUE(at::equal(x, y));
    if (name == "fp16") EXPECT_TRUE(at::allclose(x, y, 1e-3, 1e-3));
    bytes[bytes.size() / 2] ^= 0x10;
    try {
      pipeline::decode_boundary(bytes, "boundary 0->1 (activations of micro-batch 2, step 3)");
      ADD_FAILURE() << name << ": a corrupt payload decoded";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("boundary 0->1 (activations of micro-batch 2, step 3)"), std::string::npos);
    }
    bytes.resize(bytes.size() / 3);
    EXPECT_THROW(pipeline::decode_boundary(bytes, "b"), FormatError) << name;
  }
  // A payload of another shape than the boundary carries.
  const auto bytes = pipeline::encode_boundary(x, pipeline::parse_boundary_codec("fp32", 0), 0);
  EXPECT_THROW(pipeline::decode_boundary(bytes, "b", {2, 16, 32}), FormatError);
  EXPECT_THROW(pipeline::parse_boundary_codec("directq", 1), InvalidInput);
  EXPECT_THROW(pipeline::parse_boundary_codec("zip", 4), InvalidInput);
}


using Env = std::vector<std::pair<std::string, std::string>>;

// Runs a pipeline of `stages` processes (`env` added to each one's
// environment, `tag` to the directory's name); returns the directory they
// saved to.
std::string run_pipeline(int stages, const std::string& schedule, const std::string& codec, int fw, int bw,
                         int steps, const std::string& level = "L0", const std::string& init = "",
                         bool should_succeed = true, const Env& env = {}, const std::string& tag = "") {
  const std::string out = ::testing::TempDir() + "actkit_pipeline_" + std::to_string(::getpid()) + "_" +
                          std::to_string(stages) + schedule + codec + level + (init.empty() ? "" : "_init") + tag;
  files::remove_all(out);
  files::create_directories(out);
  const int port = free_local_port();
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < stages; ++r) {
    Env vars{{"RANK", std::to_string(r)},
             {"WORLD_SIZE", std::to_string(stages)},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(port)},
             {"ACTKIT_COMM_TIMEOUT", "60"}};
    vars.insert(vars.end(), env.begin(), env.end());
    specs.push_back({{ACTKIT_PIPELINE_PEER, schedule, codec, std::to_string(fw), std::to_string(bw),
                      std::to_string(steps), out, level, init},
                     vars});
  }
  bool all = true;
  for (const auto& r : run_processes(specs, std::chrono::seconds(30))) all = all && r.succeeded();
  EXPECT_EQ(all, should_succeed);
  return out;
}

// What each of `ranks` failed ranks of a run_pipeline call wrote to
// OUT/error-rank<r> ("" for a rank that wrote nothing).
std::vector<std::string> rank_errors(const std::string& out, int ranks) {
  std::vector<std::string> errors;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(out + "/error-rank" + std::to_string(r));
    errors.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return errors;
}

// Expects every one of `ranks` ranks to have failed with an error holding
// each of `parts`, then removes OUT.
void expect_every_rank_says(const std::string& out, int ranks, const std::vector<std::string>& parts) {
  const auto errors = rank_errors(out, ranks);
  for (int r = 0; r < ranks; ++r) {
    for (const auto& part : parts) {
      EXPECT_NE(errors[size_t(r)].find(part), std::string::npos) << "rank " << r << " said: " << errors[size_t(r)];
    }
  }
  files::remove_all(out);
}

// The same training in one process: the whole model, the same micro-batches,
// the loss of each divided by their number, the same optimizer.
std::shared_ptr<ZooModel> train_reference(int steps, std::vector<double>& losses) {
  const auto c = test_pipeline_config(1);
  at::manual_seed(int64_t(c.seed));
  auto model = make_model(c.model, c.model_options);
  model->train();
  torch::optim::SGD opt(model->parameters(),
                        torch::optim::SGDOptions(c.lr).momentum(0.9).weight_decay(c.weight_decay));
  TestBatches t = test_batches(c, 0, c.micro_batches);
  pipeline::BatchSource& data = *t.batches;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < c.micro_batches; ++m) {
      const auto mb = data.train_batch(step, m);
      const at::Tensor logits = model->forward(mb.inputs);
      const at::Tensor loss = fused_cross_entropy(logits.reshape({-1, logits.size(-1)}), mb.labels.reshape({-1})) /
                              double(c.micro_batches);
      loss.backward();
      loss_sum += loss.item<double>();
    }
    opt.step();
    losses.push_back(loss_sum);
  }
  return model;
}

std::map<std::string, at::Tensor> saved_parameters(const std::string& dir) {
  std::map<std::string, at::Tensor> all;
  for (const std::string& name : files::list_directory(dir)) {
    // The stages' parameters (the optimizer-stage files hold optimizer state).
    const bool pt = name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0;
    if (!pt || name.rfind("stage", 0) != 0) continue;
    for (const auto& item : read_state_dict(dir + "/" + name)) all[item.key()] = item.value();
  }
  return all;
}

TEST(Pipeline, Fp32StagesEndWhereOneProcessEnds) {
  const int steps = 3;
  std::vector<double> reference_losses;
  const auto reference = train_reference(steps, reference_losses);
  for (int stages : {2, 4}) {
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      SCOPED_TRACE(std::to_string(stages) + " stages, " + schedule);
      const std::string out = run_pipeline(stages, schedule, "fp32", 0, 0, steps);
      const auto params = saved_parameters(out);
      size_t compared = 0;
      for (const auto& item : reference->named_parameters()) {
        const auto it = params.find(item.key());
        ASSERT_NE(it, params.end()) << item.key() << " saved by no stage";
        // Only the order of floating-point sums differs (the tied embedding's
        // two gradients, the micro-batches' accumulation).
        EXPECT_TRUE(at::allclose(it->second, item.value(), 1e-4, 1e-5))
            << item.key() << ": max diff " << (it->second - item.value()).abs().max().item<float>();
        ++compared;
      }
      EXPECT_EQ(compared, params.size());
      std::ifstream in(out + "/losses");
      for (int s = 0; s < steps; ++s) {
        double loss = 0;
        in >> loss;
        EXPECT_NEAR(loss, reference_losses[size_t(s)], 1e-4) << "step " << s;
      }
      files::remove_all(out);
    }
  }
}

TEST(Pipeline, CheckpointsReloadUnderAnotherSplit) {
  const std::string two = run_pipeline(2, "1f1b", "fp32", 0, 0, 2);
  // Four stages start from what two saved and save again without a step:
  // every tensor comes back bit for bit, whichever stage holds it now.
  const std::string four = run_pipeline(4, "1f1b", "fp32", 0, 0, 0, "L0", two);
  const auto before = saved_parameters(two), after = saved_parameters(four);
  EXPECT_EQ(before.size(), after.size());
  for (const auto& [name, t] : before) {
    ASSERT_TRUE(after.count(name)) << name;
    EXPECT_TRUE(at::equal(after.at(name), t)) << name;
  }
  // A directory that mixes two runs' stage files is refused, not merged.
  files::copy_file(two + "/stage0of2.pt", four + "/stage0of2.pt");
  files::remove_all(run_pipeline(2, "gpipe", "fp32", 0, 0, 0, "L0", four, false));
  files::remove_all(two);
  files::remove_all(four);
}

TEST(Pipeline, CompressedActivationsInsideStagesToo) {
  // Level L3 inside each stage and TAH on the boundaries: the memory half
  // and the communication half in one run.
  std::vector<double> reference_losses;
  train_reference(2, reference_losses);
  const std::string out = run_pipeline(2, "gpipe", "tah", 4, 8, 2, "L3");
  std::ifstream in(out + "/losses");
  for (int s = 0; s < 2; ++s) {
    double loss = 0;
    in >> loss;
    EXPECT_NEAR(loss, reference_losses[size_t(s)], 0.05) << "step " << s;
  }
  files::remove_all(out);
}

TEST(Pipeline, CompressedBoundariesTrainCloseToFp32) {
  const int steps = 3;
  std::vector<double> reference_losses;
  train_reference(steps, reference_losses);
  for (const auto& [codec, fw, bw] : std::vector<std::tuple<std::string, int, int>>{{"directq", 8, 8}, {"tah", 4, 8}}) {
    SCOPED_TRACE(codec);
    const std::string out = run_pipeline(2, "1f1b", codec, fw, bw, steps);
    std::ifstream in(out + "/losses");
    for (int s = 0; s < steps; ++s) {
      double loss = 0;
      in >> loss;
      // Random tokens: the loss is log(256) ~ 5.55 and moves little; the
      // quantized boundaries must not move it further than that.
      EXPECT_NEAR(loss, reference_losses[size_t(s)], 0.05) << "step " << s;
    }
    // The tied embedding's two copies exchanged quantized gradients and
    // still hold the same bits.
    const auto first = read_state_dict(out + "/stage0of2.pt"), last = read_state_dict(out + "/stage1of2.pt");
    ASSERT_TRUE(first.contains("wte.weight") && last.contains("wte.weight"));
    EXPECT_TRUE(at::equal(first["wte.weight"], last["wte.weight"]));
    files::remove_all(out);
  }
}

std::vector<double> read_losses(const std::string& dir) {
  std::vector<double> v;
  std::ifstream in(dir + "/losses");
  for (double x; in >> x;) v.push_back(x);
  return v;
}

// A full-precision warm-up for another codec than aqsgd (the control that
// gives DirectQ AQ-SGD's exact start): the first step's activations cross
// in fp32, so its loss is the fp32 run's to the bit; without it, it is not.
TEST(Pipeline, AWarmUpSendsTheFirstStepsActivationsInFullPrecision) {
  const int steps = 2;
  const auto fp32 = read_losses(run_pipeline(2, "1f1b", "fp32", 0, 0, steps));
  const auto cold = read_losses(run_pipeline(2, "1f1b", "directq", 2, 8, steps, "L0", "", true, {}, "_cold"));
  const auto warm = read_losses(
      run_pipeline(2, "1f1b", "directq", 2, 8, steps, "L0", "", true, {{"PEER_WARMUP_STEPS", "1"}}, "_warm"));
  ASSERT_EQ(fp32.size(), size_t(steps));
  ASSERT_EQ(cold.size(), size_t(steps));
  ASSERT_EQ(warm.size(), size_t(steps));
  EXPECT_EQ(warm[0], fp32[0]);
  EXPECT_NE(cold[0], fp32[0]) << "2-bit activations left the first loss as it was: the test shows nothing";
  EXPECT_NE(warm[1], fp32[1]);  // then DirectQ (and its 8-bit gradients since the start)
}

// Validating between steps (--eval-every) changes no step of an AQ-SGD
// run, in its full-precision warm-up or after it: the validation crosses
// the boundary beside m(ξ), never through it.
TEST(PipelineAqsgd, ValidatingBetweenStepsChangesNoStep) {
  const int steps = 4;  // 2 of warm-up, 2 of deltas
  const std::string plain = run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", true, {}, "_plain");
  const std::string often =
      run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", true, {{"PEER_VALIDATE_EVERY", "1"}}, "_validated");
  const auto expected = read_losses(plain), got = read_losses(often);
  ASSERT_EQ(got.size(), size_t(steps));
  EXPECT_EQ(got, expected);
  std::vector<double> validation;
  std::ifstream in(often + "/validation");
  for (double x; in >> x;) validation.push_back(x);
  EXPECT_FALSE(validation.empty());
  EXPECT_EQ(validation.size() % steps, 0u);
  for (double x : validation) EXPECT_TRUE(std::isfinite(x) && x > 0);
  files::remove_all(plain);
  files::remove_all(often);
}

TEST(PipelineAqsgd, BothSidesKeepTheSameBuffersAndTrainCloseToFp32) {
  // 16 examples, 8 a step: every example comes back every other step. The
  // peers compare a checksum of both sides' m(ξ) after every micro-batch
  // and fail on a difference; the first two steps are the warm-up.
  const int steps = 6;
  for (int stages : {2, 4}) {
    SCOPED_TRACE(std::to_string(stages) + " stages");
    const std::string fp32 = run_pipeline(stages, "1f1b", "fp32", 0, 0, steps, "L0", "", true,
                                          {{"PEER_POOL", "16"}}, "_pool");
    for (const std::string budget : {"-1", "0", "20000"}) {  // memory, files, both
      SCOPED_TRACE("buffer memory " + budget);
      const std::string out = run_pipeline(stages, "1f1b", "aqsgd", 4, 8, steps, "L0", "", true,
                                           {{"PEER_BUFFER_MEMORY", budget}}, "_" + budget);
      const auto expected = read_losses(fp32), got = read_losses(out);
      ASSERT_EQ(got.size(), size_t(steps));
      for (int s = 0; s < steps; ++s) EXPECT_NEAR(got[size_t(s)], expected[size_t(s)], 0.05) << "step " << s;
      files::remove_all(out);
    }
    files::remove_all(fp32);
  }
}

TEST(PipelineAqsgd, ARestartedRunContinuesBitIdentically) {
  const int steps = 6;
  const std::string tmp = ::testing::TempDir() + "actkit_aqsgd_" + std::to_string(::getpid());
  files::remove_all(tmp);
  const std::string ckpt = tmp + "/ckpt";
  // Uninterrupted.
  const std::string whole = run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", true,
                                         {{"PEER_BUFFER_MEMORY", "0"}}, "_whole");
  // Checkpointed after step 3, on for two more steps (writing m(ξ) past the
  // checkpoint), then killed.
  const Env crashed{{"PEER_BUFFER_MEMORY", "0"}, {"PEER_BUFFERS", ckpt + "/buffers"},
                    {"PEER_SAVE_AT", "3:" + ckpt}, {"PEER_CRASH", "1"}};
  files::remove_all(run_pipeline(2, "1f1b", "aqsgd", 2, 8, 5, "L0", "", true, crashed, "_crash"));
  // Resumed from the checkpoint to the end.
  const Env resumed{{"PEER_BUFFER_MEMORY", "0"}, {"PEER_BUFFERS", ckpt + "/buffers"}, {"PEER_RESUME", ckpt}};
  const std::string rest = run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", true, resumed, "_resumed");
  const auto a = saved_parameters(whole), b = saved_parameters(rest);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, b.at(name))) << name;
  const auto la = read_losses(whole), lb = read_losses(rest);
  ASSERT_EQ(lb.size(), size_t(steps - 3));
  for (int s = 3; s < steps; ++s) EXPECT_EQ(la[size_t(s)], lb[size_t(s - 3)]) << "step " << s;

  // Another setting than the saved run's (4-bit deltas) is refused.
  expect_every_rank_says(run_pipeline(2, "1f1b", "aqsgd", 4, 8, steps, "L0", "", false, resumed, "_other"), 2,
                         {"saved forward_codec=aqsgd2 but now forward_codec=aqsgd4"});
  // The resumed run checkpointed the stores at step 6 on its way out, as a
  // run killed after its stores took step 6 but before the commit would:
  // the step-3 checkpoint still resumes, and to the same end.
  const std::string again = run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", true, resumed, "_again");
  const auto c = saved_parameters(again);
  ASSERT_EQ(a.size(), c.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, c.at(name))) << name;
  files::remove_all(again);
  // A truncated store is refused too (as torn, or as holding no checkpoint,
  // whichever the cut reaches first); every rank names the store.
  files::remove_all(run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", true, crashed, "_crash2"));
  const std::string store = ckpt + "/buffers/boundary0to1-receiver.store";
  files::resize_file(store, files::file_size(store) / 3);
  expect_every_rank_says(run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", false, resumed, "_torn"), 2,
                         {"boundary 0->1, resuming at step 3", "boundary0to1-receiver.store"});
  // Two whole stores of the same step and examples that hold different
  // m(ξ): the receiver's store of a run with 3-bit deltas beside the
  // sender's of a 2-bit run. Each side opens its own store, and the two
  // sides' digests disagree.
  const Env crashed3{{"PEER_BUFFER_MEMORY", "0"}, {"PEER_BUFFERS", tmp + "/ckpt3/buffers"},
                     {"PEER_SAVE_AT", "3:" + tmp + "/ckpt3"}, {"PEER_CRASH", "1"}};
  files::remove_all(run_pipeline(2, "1f1b", "aqsgd", 3, 8, 3, "L0", "", true, crashed3, "_crash3"));
  files::copy_file(tmp + "/ckpt3/buffers/boundary0to1-receiver.store", store);
  expect_every_rank_says(run_pipeline(2, "1f1b", "aqsgd", 2, 8, steps, "L0", "", false, resumed, "_mixed"), 2,
                         {"the two sides' aqsgd buffers disagree", "step 3, 16 examples, digest"});
  files::remove_all(whole);
  files::remove_all(rest);
  files::remove_all(tmp);
}

TEST(Pipeline, AnL3RunResumesBitIdentically) {
  // Inside the stages L3 rounds stochastically (a counter per layer picks
  // the noise) and re-allocates bits from gradient averages: the checkpoint
  // carries both, so a resumed run compresses as the uninterrupted one.
  const int steps = 5;
  const std::string tmp = ::testing::TempDir() + "actkit_l3_resume_" + std::to_string(::getpid());
  files::remove_all(tmp);
  const std::string ckpt = tmp + "/ckpt";
  const std::string whole = run_pipeline(2, "1f1b", "fp32", 0, 0, steps, "L3", "", true, {}, "_whole");
  const Env crashed{{"PEER_SAVE_AT", "2:" + ckpt}, {"PEER_CRASH", "1"}};
  files::remove_all(run_pipeline(2, "1f1b", "fp32", 0, 0, 4, "L3", "", true, crashed, "_crash"));
  const std::string rest =
      run_pipeline(2, "1f1b", "fp32", 0, 0, steps, "L3", "", true, {{"PEER_RESUME", ckpt}}, "_resumed");
  const auto a = saved_parameters(whole), b = saved_parameters(rest);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, b.at(name))) << name;
  const auto la = read_losses(whole), lb = read_losses(rest);
  ASSERT_EQ(lb.size(), size_t(steps - 2));
  for (int s = 2; s < steps; ++s) EXPECT_EQ(la[size_t(s)], lb[size_t(s - 2)]) << "step " << s;
  // The checkpoint of an L3 run does not resume at another level: the
  // settings differ, and every rank says so.
  files::remove_all(
      run_pipeline(2, "1f1b", "fp32", 0, 0, steps, "L2", "", false, {{"PEER_RESUME", ckpt}}, "_other"));
  files::remove_all(whole);
  files::remove_all(rest);
  files::remove_all(tmp);
}


// ---- Data-parallel replicas of a pipeline (`actkit pipeline --dp`) ----

// Runs STAGES × REPLICAS ranks of actkit_pipeline_dp_peer; returns OUT.
std::string run_replicated(int stages, int replicas, int micro, const std::string& optimizer, int warmup, int steps,
                           std::vector<ProcessResult>* results_out = nullptr, int timeout_s = 60) {
  const std::string out = c10::str(files::temp_directory(), "/actkit-pipeline-dp-", getpid(),
                                   "-", stages, "x", replicas, "-", optimizer);
  files::remove_all(out);
  files::create_directories(out);
  const auto results = run_ranks(ACTKIT_PIPELINE_DP_PEER, stages * replicas,
                                 {std::to_string(stages), std::to_string(replicas), std::to_string(micro), optimizer,
                                  std::to_string(warmup), std::to_string(steps), out},
                                 timeout_s);
  if (results_out != nullptr) {
    *results_out = results;
    return out;
  }
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].succeeded()) << "rank " << r << ": " << results[r].output;
  return out;
}

std::map<std::string, at::Tensor> replica_parameters(const std::string& out, int replica, int stage) {
  std::map<std::string, at::Tensor> params;
  for (const auto& item : read_state_dict(c10::str(out, "/params-replica", replica, "-stage", stage, ".pt"))) {
    params[item.key()] = item.value();
  }
  return params;
}

std::vector<double> replica_losses(const std::string& out, int replica) {
  std::ifstream in(c10::str(out, "/losses-replica", replica));
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

// Two replicas of M micro-batches each, their gradients averaged in fp32,
// compute what one pipeline of their 2·M micro-batches computes: the same
// loss per step (the mean of the replicas' losses), the same parameters up
// to the order of floating-point sums, and every replica the same bits.
TEST(PipelineDataParallel, TwoReplicasEndWhereOnePipelineOfTheirMicroBatchesEnds) {
  const int steps = 3;
  const std::string ref = run_replicated(2, 1, 4, "adam", 0, steps);
  const std::string dp = run_replicated(2, 2, 2, "adam", 0, steps);
  const auto ref_losses = replica_losses(ref, 0), a = replica_losses(dp, 0), b = replica_losses(dp, 1);
  ASSERT_EQ(ref_losses.size(), size_t(steps));
  ASSERT_EQ(a.size(), size_t(steps));
  ASSERT_EQ(b.size(), size_t(steps));
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR((a[size_t(s)] + b[size_t(s)]) / 2, ref_losses[size_t(s)], 1e-5) << "step " << s;
    EXPECT_GT(std::fabs(a[size_t(s)] - b[size_t(s)]), 1e-4) << "the replicas saw the same examples in step " << s;
  }
  for (int stage = 0; stage < 2; ++stage) {
    const auto expected = replica_parameters(ref, 0, stage);
    const auto first = replica_parameters(dp, 0, stage), second = replica_parameters(dp, 1, stage);
    ASSERT_EQ(first.size(), expected.size());
    for (const auto& [name, value] : expected) {
      EXPECT_TRUE(at::equal(first.at(name), second.at(name))) << "stage " << stage << " " << name;
      // Adam's first steps move each entry by about lr·sign(gradient): an
      // entry whose gradient is rounding noise may go either way (2·lr per step).
      const double max_diff = (first.at(name) - value).abs().max().item<double>();
      const double mean_diff = (first.at(name) - value).abs().mean().item<double>();
      EXPECT_LE(max_diff, 2 * 1e-3 * steps + 1e-6) << "stage " << stage << " " << name;
      EXPECT_LT(mean_diff, 1e-5) << "stage " << stage << " " << name;
    }
  }
  files::remove_all(ref);
  files::remove_all(dp);
}

// With 1-bit Adam across the replicas, the replicas still hold the same
// bits after the freeze (the compressed allreduce returns the same average
// everywhere), and so do the two copies of GPT-2's tied embedding on the
// first and last stage (each stage exchanges it with an optimizer of its
// own, over the same values).
TEST(PipelineDataParallel, OneBitReplicasAndTiedCopiesStayEqual) {
  const int steps = 5;
  const std::string dp = run_replicated(2, 2, 2, "onebit-adam", 2, steps);
  for (int replica = 0; replica < 2; ++replica) {
    const auto losses = replica_losses(dp, replica);
    ASSERT_EQ(losses.size(), size_t(steps));
    for (double l : losses) EXPECT_TRUE(std::isfinite(l));
    EXPECT_TRUE(at::equal(replica_parameters(dp, replica, 0).at("wte.weight"),
                          replica_parameters(dp, replica, 1).at("wte.weight")))
        << "replica " << replica << ": the tied embedding's copies drifted apart";
  }
  for (int stage = 0; stage < 2; ++stage) {
    const auto first = replica_parameters(dp, 0, stage), second = replica_parameters(dp, 1, stage);
    for (const auto& [name, value] : first) {
      EXPECT_TRUE(at::equal(value, second.at(name))) << "stage " << stage << " " << name;
    }
  }
  files::remove_all(dp);
}

// A rank that dies (rank 3: stage 1 of replica 1) makes every other rank
// fail within the timeout, not hang; its pipeline neighbour and its
// replica partner name it by its rank in the whole group.
TEST(PipelineDataParallel, ADeadRankIsNamedByItsNeighbours) {
  setenv("PEER_DIE_RANK", "3", 1);
  std::vector<ProcessResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out = run_replicated(2, 2, 2, "onebit-adam", 1, 6, &results, 10);
  unsetenv("PEER_DIE_RANK");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[3].exit_status, 9);
  EXPECT_NE(results[0].exit_status, 0) << "rank 0 finished a run rank 3 left";
  EXPECT_EQ(results[0].signal, 0) << "rank 0 hung until killed";
  EXPECT_EQ(results[1].exit_status, 3) << "its replica partner did not name rank 3";
  EXPECT_EQ(results[2].exit_status, 3) << "its pipeline neighbour did not name rank 3";
  EXPECT_LT(seconds, 40);
  files::remove_all(out);
}

// A diverged run's loss reaches rank 0 as it is: NaN and Inf are numbers
// the loss relay carries (a text format without them would fail the run).
TEST(StageReports, TheLossRelayCarriesNanAndInf) {
  GroupConfig g;
  g.world_size = 2;
  g.master_port = free_local_port();
  g.timeout = std::chrono::seconds(30);
  for (const double value : {std::nan(""), std::numeric_limits<double>::infinity(), 2.5}) {
    double received = 0;
    g.master_port = free_local_port();
    std::thread last([&] {
      GroupConfig mine = g;
      mine.rank = 1;
      Communicator comm(mine);
      pipeline::relay_to_first(comm, 1, 2, value, "the loss");
      comm.flush();
      comm.barrier();
    });
    {
      Communicator comm(g);
      comm.expect(1, pipeline::kReports, 1, pipeline::kMaxReportBytes);
      received = pipeline::relay_to_first(comm, 0, 2, 0.0, "the loss");
      comm.barrier();
    }
    last.join();
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(received));
    } else {
      EXPECT_EQ(received, value);
    }
  }
}

}  // namespace
}  // namespace actkit
