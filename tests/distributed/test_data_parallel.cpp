// The 1-bit codec, the compressed allreduce and the data-parallel
// optimizers: in this process (a group of one), and as 2-4 real ranks over
// Gloo on loopback (tests/distributed/dp_peer_main.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "test_paths.h"  // generated: where the test programs and fixtures are
#include "actkit/process/process.h"
#include "peer_ranks.h"
#include "actkit/comm/compressed_allreduce.h"
#include "actkit/comm/group_config.h"
#include "actkit/comm/onebit_codec.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/optim/adam.h"
#include "actkit/optim/lamb.h"

namespace actkit {
namespace {

using Clock = std::chrono::steady_clock;

TEST(OneBitCodec, ScaleKeepsTheNormAndZeroIsPositive) {
  at::Tensor x = at::tensor({3.f, -1.f, 0.f, 2.f, -2.f, 0.5f, -0.5f, 1.f});
  at::Tensor error = at::zeros({8});
  std::vector<uint8_t> bytes(size_t(onebit_chunk_bytes(8)));
  ASSERT_EQ(bytes.size(), 5u);
  ASSERT_TRUE(onebit_encode(x, error, bytes.data()));
  const double norm = x.norm().item<double>();
  EXPECT_NEAR(onebit_scale(bytes.data()), norm / std::sqrt(8.0), 1e-6);
  EXPECT_EQ(bytes[4], 0b10101101);  // bit k: element k >= 0; element 2 is 0, so +
  at::Tensor decoded = at::zeros({8});
  ASSERT_TRUE(onebit_decode(bytes.data(), decoded));
  EXPECT_NEAR(decoded.norm().item<double>(), norm, 1e-5);
  EXPECT_TRUE(at::allclose(decoded + error, x, 0, 1e-6));  // nothing lost: it is in the error
}

TEST(OneBitCodec, ErrorFeedbackTelescopes) {
  // Σ decoded = Σ inputs − the last error, whatever the inputs.
  at::Tensor error = at::zeros({4096});
  at::Tensor sum_in = at::zeros({4096}, at::kDouble), sum_out = at::zeros({4096}, at::kDouble);
  std::vector<uint8_t> bytes(size_t(onebit_chunk_bytes(4096)));
  torch::manual_seed(3);
  for (int t = 0; t < 50; ++t) {
    at::Tensor x = at::randn({4096}) * (1 + t % 5) + 0.3;
    ASSERT_TRUE(onebit_encode(x, error, bytes.data()));
    at::Tensor y = at::zeros({4096});
    onebit_decode(bytes.data(), y);
    sum_in += x.to(at::kDouble);
    sum_out += y.to(at::kDouble);
  }
  EXPECT_LT((sum_out - (sum_in - error.to(at::kDouble))).abs().max().item<double>(), 1e-3);
  // The error stays bounded (it does not grow with the steps).
  EXPECT_LT(error.abs().max().item<double>(), 30.0);
}

TEST(OneBitCodec, NonFiniteInputIsRefusedAndLeavesTheErrorAlone) {
  at::Tensor x = at::ones({16});
  x[5] = std::numeric_limits<float>::infinity();
  at::Tensor error = at::full({16}, 0.25f);
  std::vector<uint8_t> bytes(size_t(onebit_chunk_bytes(16)));
  EXPECT_FALSE(onebit_encode(x, error, bytes.data()));
  EXPECT_TRUE(std::isnan(onebit_scale(bytes.data())));
  EXPECT_TRUE(at::equal(error, at::full({16}, 0.25f)));
  at::Tensor out = at::full({16}, 7.f);
  EXPECT_FALSE(onebit_decode(bytes.data(), out));  // a NaN scale decodes to nothing
  EXPECT_TRUE(at::equal(out, at::full({16}, 7.f)));
  const float negative = -1.f;
  std::memcpy(bytes.data(), &negative, 4);
  EXPECT_FALSE(onebit_decode(bytes.data(), out));
}

TEST(OneBitCodec, BadTensorsAreRefused) {
  std::vector<uint8_t> bytes(64);
  at::Tensor error = at::zeros({8});
  EXPECT_THROW(onebit_encode(at::zeros({8}, at::kDouble), error, bytes.data()), InvalidInput);
  EXPECT_THROW(onebit_encode(at::zeros({12}), error, bytes.data()), InvalidInput);  // not a multiple of 8
  at::Tensor strided = at::zeros({16}).slice(0, 0, 16, 2);
  EXPECT_THROW(onebit_encode(strided, error, bytes.data()), InvalidInput);
  at::Tensor wrong = at::zeros({16});
  EXPECT_THROW(onebit_encode(at::zeros({8}), wrong, bytes.data()), InvalidInput);
}

TEST(CompressedAllreduce, GroupOfOnePadsAndKeepsBothErrors) {
  CompressedAllreduce ar(nullptr, 13);
  EXPECT_EQ(ar.padded_numel(), 16);  // a multiple of 1·lcm(1, 8)
  at::Tensor sum_in = at::zeros({13}, at::kDouble), sum_out = at::zeros({13}, at::kDouble);
  torch::manual_seed(5);
  for (int t = 0; t < 40; ++t) {
    at::Tensor x = at::randn({13});
    sum_in += x.to(at::kDouble);
    ASSERT_TRUE(ar.average(x, "test"));
    sum_out += x.to(at::kDouble);
  }
  // Both errors telescope: Σ out = Σ in − worker error − server error.
  const at::Tensor lost = (ar.worker_error() + ar.server_error()).narrow(0, 0, 13).to(at::kDouble);
  EXPECT_LT((sum_out - (sum_in - lost)).abs().max().item<double>(), 1e-4);
  at::Tensor wrong = at::zeros({12});
  EXPECT_THROW(ar.average(wrong, "test"), InvalidInput);
  EXPECT_THROW(ar.set_errors(at::zeros({8}), at::zeros({16})), InvalidInput);
}

TEST(CompressedAllreduce, NanSkipsAndCommitsNothing) {
  CompressedAllreduce ar(nullptr, 32);
  at::Tensor x = at::randn({32});
  ASSERT_TRUE(ar.average(x, "test"));
  const at::Tensor worker = ar.worker_error().clone(), server = ar.server_error().clone();
  at::Tensor bad = at::randn({32});
  bad[7] = std::nanf("");
  const at::Tensor kept = bad.clone();
  EXPECT_FALSE(ar.average(bad, "test"));
  EXPECT_TRUE(at::equal(bad.isnan(), kept.isnan()));
  EXPECT_TRUE(at::equal(ar.worker_error(), worker));
  EXPECT_TRUE(at::equal(ar.server_error(), server));
}

// A quadratic bowl: what every optimizer here must descend.
struct Bowl {
  std::vector<torch::Tensor> params, targets;
  explicit Bowl(uint64_t seed) {
    torch::manual_seed(int64_t(seed));
    for (auto shape : std::vector<std::vector<int64_t>>{{32, 16}, {16}, {8, 4, 3}}) {
      params.push_back(torch::randn(shape).requires_grad_(true));
      targets.push_back(torch::randn(shape));
    }
  }
  double loss_and_grads() {
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss = torch::zeros({});
    for (size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] - targets[i]).pow(2).sum();
    loss.backward();
    return loss.item<double>();
  }
};

TEST(DataParallelOptimizer, AdamEqualsLibTorchsAdamBitForBit) {
  for (double wd : {0.0, 0.05}) {
    Bowl a(1), b(1);
    optim::Adam ours(a.params, optim::AdamOptions(0.05).weight_decay(wd));
    torch::optim::Adam theirs(b.params, torch::optim::AdamOptions(0.05).weight_decay(wd));
    for (int s = 0; s < 25; ++s) {
      a.loss_and_grads();
      b.loss_and_grads();
      ours.step();
      theirs.step();
      for (size_t i = 0; i < a.params.size(); ++i) ASSERT_TRUE(at::equal(a.params[i], b.params[i])) << "step " << s;
    }
  }
}

// LAMB against eq. (2) written out per element in double precision.
TEST(DataParallelOptimizer, LambFollowsEquationTwo) {
  Bowl a(2);
  const double lr = 0.02, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  optim::Lamb lamb(a.params, optim::LambOptions(lr).weight_decay(wd).c_min(0.01).c_max(10));
  std::vector<std::vector<double>> x, m, v;
  for (auto& p : a.params) {
    auto c = p.detach().to(at::kDouble).reshape({-1});
    x.emplace_back(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    m.emplace_back(size_t(c.numel()), 0.0);
    v.emplace_back(size_t(c.numel()), 0.0);
  }
  for (int s = 0; s < 10; ++s) {
    a.loss_and_grads();
    for (size_t l = 0; l < x.size(); ++l) {
      auto g = a.params[l].grad().to(at::kDouble).reshape({-1});
      std::vector<double> u(x[l].size());
      double xn = 0, un = 0;
      for (size_t j = 0; j < u.size(); ++j) {
        const double gj = g[int64_t(j)].item<double>();
        m[l][j] = b1 * m[l][j] + (1 - b1) * gj;
        v[l][j] = b2 * v[l][j] + (1 - b2) * gj * gj;
        u[j] = m[l][j] / (std::sqrt(v[l][j]) + eps) + wd * x[l][j];
        xn += x[l][j] * x[l][j];
        un += u[j] * u[j];
      }
      const double c = std::clamp(std::sqrt(xn) / std::sqrt(un), 0.01, 10.0);
      for (size_t j = 0; j < u.size(); ++j) x[l][j] -= lr * c * u[j];
    }
    lamb.step();
    for (size_t l = 0; l < x.size(); ++l) {
      auto ours = a.params[l].detach().to(at::kDouble).reshape({-1});
      for (size_t j = 0; j < x[l].size(); ++j) {
        ASSERT_NEAR(ours[int64_t(j)].item<double>(), x[l][j], 1e-4 * (1 + std::abs(x[l][j]))) << "step " << s;
      }
    }
  }
}

TEST(DataParallelOptimizer, OneBitFormsDescendAfterTheFreeze) {
  for (const std::string algo : {"adam", "lamb"}) {
    Bowl bowl(3);
    std::unique_ptr<optim::DataParallelOptimizer> opt;
    optim::ExchangeOptions eo{nullptr, optim::Exchange::kOneBit, 20};
    if (algo == "adam") {
      opt = std::make_unique<optim::Adam>(bowl.params, optim::AdamOptions(0.05), eo);
    } else {
      opt = std::make_unique<optim::Lamb>(bowl.params, optim::LambOptions(0.05).c_max(10), eo);
    }
    // 1-bit momentum gives every value the chunk's scale, so values whose
    // own momentum is near zero move ±scale on alternate steps (the error
    // feedback cancels it over two): compare the better of the last two.
    double at_freeze = 0, last = 0, previous = 0;
    for (int s = 0; s < 150; ++s) {
      previous = last;
      last = bowl.loss_and_grads();
      if (s == 20) at_freeze = last;
      opt->step();
      EXPECT_EQ(opt->compressing(), s >= 19) << algo;
    }
    EXPECT_LT(std::min(last, previous), 0.2 * at_freeze) << algo;
  }
}

// In the compression stage r is the largest ratio of the update's
// denominators, (√v_f + ε)/(√v_fresh + ε), read back from the saved state
// (v_f, v_fresh, c_avg) and the coefficient c = r·c_avg of the step; the
// clips are opened wide so that the raw ratio shows. The ratio of the
// variances, its square, fails this.
TEST(DataParallelOptimizer, OneBitLambRatioIsTheDenominatorsRatio) {
  Bowl bowl(8);
  optim::OneBitLambOptions wide;
  wide.r_min = 1e-6;
  wide.r_max = 1e6;
  wide.r_threshold = 1e6;
  const double eps = 1e-8;
  optim::Lamb opt(bowl.params, optim::LambOptions(0.01).eps(eps).c_max(10), {nullptr, optim::Exchange::kOneBit, 3},
                  wide);
  for (int s = 0; s < 5; ++s) {
    bowl.loss_and_grads();
    opt.step();
  }
  ASSERT_TRUE(opt.compressing());
  torch::serialize::OutputArchive out;
  opt.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  for (size_t i = 0; i < bowl.params.size(); ++i) {
    torch::Tensor frozen, fresh, scalars;
    in.read(c10::str("p", i, ".exp_avg_sq"), frozen);
    in.read(c10::str("p", i, ".fresh_sq"), fresh);
    in.read(c10::str("p", i, ".scalars"), scalars);
    // ĉ: the coefficients' average, bias-corrected over the k averaged.
    const double c_avg = scalars[0].item<double>() / (1 - std::pow(0.9, scalars[4].item<double>()));
    const double expected = ((frozen.to(at::kDouble).sqrt() + eps) / (fresh.to(at::kDouble).sqrt() + eps)).max()
                                .item<double>();
    const double squared = (frozen.to(at::kDouble) / fresh.to(at::kDouble)).max().item<double>();
    ASSERT_GT(std::fabs(squared - expected), 0.01 * expected) << "the test cannot tell the two ratios apart";
    EXPECT_NEAR(opt.coefficients()[i] / c_avg, expected, 1e-5 * expected) << "parameter " << i;
  }
}

// LAMB's fallback c = 1 (a zero tensor: a zero-initialised bias at its
// first step) is applied but not averaged into the coefficient the
// compression stage uses, and that average is bias-corrected: a tensor
// whose coefficient stays clipped gets exactly that clip (times r) after
// the freeze.
TEST(DataParallelOptimizer, OneBitLambAveragesOnlyMeasuredCoefficients) {
  torch::manual_seed(3);
  auto bias = torch::zeros({16}).requires_grad_(true);
  auto weight = torch::randn({16, 16}).requires_grad_(true);
  const auto target = torch::randn({16});
  optim::OneBitLambOptions no_ratio;
  no_ratio.r_min = no_ratio.r_max = 1;  // c = ĉ exactly after the freeze
  optim::Lamb opt({bias, weight}, optim::LambOptions(0.01).c_min(0.02).c_max(0.05),
                  {nullptr, optim::Exchange::kOneBit, 3}, no_ratio);
  for (int s = 0; s < 5; ++s) {
    bias.mutable_grad() = torch::Tensor();
    weight.mutable_grad() = torch::Tensor();
    ((weight.matmul(torch::ones({16})) + bias - target).pow(2).sum()).backward();
    opt.step();
    if (s == 0) EXPECT_EQ(opt.coefficients()[0], 1.0) << "the zero bias's first step falls back to c = 1";
  }
  ASSERT_TRUE(opt.compressing());
  // The bias's three warm-up coefficients: the fallback 1, then two clipped
  // at c_min (its values are small against its update); the weight's three
  // clipped at c_max. With the 1 averaged in, the bias would step with
  // 0.1·(0.81 + 0.9·0.02 + 0.02) = 0.085; without the correction, 0.0038.
  EXPECT_NEAR(opt.coefficients()[0], 0.02, 1e-9);
  EXPECT_NEAR(opt.coefficients()[1], 0.05, 1e-9);
}

// Rows that no warm-up gradient reached (a position table longer than the
// sequences) stay where they are in the compression stage: 1-bit coding
// would send ±scale for their zero momentum and move them every step.
TEST(DataParallelOptimizer, ElementsNoWarmupGradientReachedStayPut) {
  for (const std::string algo : {"adam", "lamb"}) {
    torch::manual_seed(5);
    auto table = torch::randn({8, 4}).requires_grad_(true);
    const auto target = torch::randn({4, 4});
    const at::Tensor unused_before = table.detach().narrow(0, 4, 4).clone();
    optim::ExchangeOptions eo{nullptr, optim::Exchange::kOneBit, 3};
    std::unique_ptr<optim::DataParallelOptimizer> opt;
    if (algo == "adam") {
      opt = std::make_unique<optim::Adam>(std::vector<torch::Tensor>{table}, optim::AdamOptions(0.05), eo);
    } else {
      opt = std::make_unique<optim::Lamb>(std::vector<torch::Tensor>{table}, optim::LambOptions(0.05), eo);
    }
    for (int s = 0; s < 10; ++s) {
      table.mutable_grad() = torch::Tensor();
      (table.narrow(0, 0, 4) - target).pow(2).sum().backward();  // rows 4..7: gradient exactly 0
      opt->step();
    }
    ASSERT_TRUE(opt->compressing()) << algo;
    EXPECT_EQ(opt->masked_elements(), 16) << algo;
    EXPECT_TRUE(at::equal(table.detach().narrow(0, 4, 4), unused_before)) << algo << ": the unused rows moved";
    EXPECT_FALSE(at::equal(table.detach().narrow(0, 0, 4), target)) << algo;
  }
}

TEST(DataParallelOptimizer, NonFiniteGradientSkipsTheStep) {
  Bowl a(4), b(4);
  optim::Lamb with(a.params, optim::LambOptions(0.05), {nullptr, optim::Exchange::kOneBit, 3});
  optim::Lamb without(b.params, optim::LambOptions(0.05), {nullptr, optim::Exchange::kOneBit, 3});
  for (int s = 0; s < 8; ++s) {
    if (s == 2 || s == 5) {  // one in the warm-up, one compressed
      a.loss_and_grads();
      a.params[1].mutable_grad()[3] = std::numeric_limits<float>::infinity();
      with.step();
      EXPECT_TRUE(with.last_step_skipped());
    }
    a.loss_and_grads();
    b.loss_and_grads();
    with.step();
    without.step();
    for (size_t i = 0; i < a.params.size(); ++i) ASSERT_TRUE(at::equal(a.params[i], b.params[i])) << "step " << s;
  }
  EXPECT_EQ(with.skipped_steps(), 2);
  EXPECT_EQ(with.steps(), without.steps());
}

TEST(DataParallelOptimizer, EmptyAndGradientlessParametersAreLeftAlone) {
  auto empty = torch::zeros({0}).requires_grad_(true);
  auto unused = torch::ones({5}).requires_grad_(true);
  Bowl bowl(5);
  auto params = bowl.params;
  params.push_back(empty);
  params.push_back(unused);
  optim::Adam opt(params, optim::AdamOptions(0.1), {nullptr, optim::Exchange::kOneBit, 2});
  for (int s = 0; s < 6; ++s) {
    bowl.loss_and_grads();
    opt.step();
  }
  EXPECT_TRUE(at::equal(unused, torch::ones({5})));
  EXPECT_EQ(opt.fused_numel(), 32 * 16 + 16 + 8 * 4 * 3);
}

TEST(DataParallelOptimizer, CheckpointResumesBitForBitAndRefusesOtherSettings) {
  const std::string dir = files::temp_directory() + "/actkit-optim-" + std::to_string(getpid());
  files::create_directories(dir);
  const std::string file = dir + "/lamb.pt";
  Bowl a(6);
  optim::ExchangeOptions eo{nullptr, optim::Exchange::kOneBit, 4};
  optim::Lamb opt(a.params, optim::LambOptions(0.05), eo);
  // Rows 0-3 of the first tensor never get a gradient: the checkpoint
  // carries their mask.
  const auto grads = [](Bowl& bowl) {
    bowl.loss_and_grads();
    bowl.params[0].mutable_grad().narrow(0, 0, 4).zero_();
  };
  std::vector<torch::Tensor> at6;
  for (int s = 0; s < 12; ++s) {
    if (s == 6) {
      torch::save(opt, file);
      for (auto& p : a.params) at6.push_back(p.detach().clone());
    }
    grads(a);
    opt.step();
  }
  EXPECT_EQ(opt.masked_elements(), 4 * 16);
  Bowl b(6);
  for (size_t i = 0; i < at6.size(); ++i) b.params[i].detach().copy_(at6[i]);
  optim::Lamb resumed(b.params, optim::LambOptions(0.05), eo);
  torch::load(resumed, file);
  EXPECT_TRUE(resumed.compressing());
  for (int s = 6; s < 12; ++s) {
    grads(b);
    resumed.step();
  }
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(at::equal(a.params[i], b.params[i]));
  EXPECT_EQ(resumed.coefficients(), opt.coefficients());
  EXPECT_EQ(resumed.masked_elements(), opt.masked_elements());

  optim::Adam adam(b.params, optim::AdamOptions(0.05), eo);
  EXPECT_THROW(torch::load(adam, file), InvalidInput);  // another algorithm
  optim::Lamb fp32(b.params, optim::LambOptions(0.05));
  EXPECT_THROW(torch::load(fp32, file), InvalidInput);  // another exchange
  Bowl c(7);
  c.params.pop_back();
  optim::Lamb fewer(c.params, optim::LambOptions(0.05), eo);
  EXPECT_THROW(torch::load(fewer, file), InvalidInput);  // another model
  files::remove_all(dir);
}

TEST(DataParallelOptimizer, CheckpointBeforeTheFirstStepLoads) {
  Bowl a(9);
  optim::Lamb opt(a.params, optim::LambOptions(0.05), {nullptr, optim::Exchange::kOneBit, 2});
  std::stringstream buffer;
  torch::save(opt, buffer);
  optim::Lamb again(a.params, optim::LambOptions(0.05), {nullptr, optim::Exchange::kOneBit, 2});
  torch::load(again, buffer);
  EXPECT_EQ(again.steps(), 0);
}

TEST(DataParallelOptimizer, BadSettingsAreRefused) {
  Bowl bowl(8);
  EXPECT_THROW(optim::Adam(bowl.params, optim::AdamOptions(-1)), InvalidInput);
  EXPECT_THROW(optim::Adam(bowl.params, optim::AdamOptions(0.1).beta2(1.0)), InvalidInput);
  EXPECT_THROW(optim::Lamb(bowl.params, optim::LambOptions(0.1).c_min(0.5).c_max(0.1)), InvalidInput);
  EXPECT_THROW(optim::Lamb(bowl.params, optim::LambOptions(0.1), {nullptr, optim::Exchange::kOneBit, -1}),
               InvalidInput);
  EXPECT_THROW(optim::Adam(bowl.params, optim::AdamOptions(0.1), {nullptr, optim::Exchange::kOneBit, 0}),
               InvalidInput);  // 1-bit needs a variance to freeze
  optim::OneBitLambOptions r;
  r.r_min = 5;
  EXPECT_THROW(optim::Lamb(bowl.params, optim::LambOptions(0.1), {}, r), InvalidInput);
  EXPECT_THROW(optim::parse_exchange("int8"), InvalidInput);
}

std::vector<ProcessResult> run_dp_peers(int world, const std::vector<std::string>& args, int timeout_s = 30) {
  return run_ranks(ACTKIT_DP_PEER, world, args, timeout_s);
}

void expect_all(const std::vector<ProcessResult>& results, int status, const std::string& what) {
  for (size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r].exit_status, status) << what << ": rank " << r;
}

TEST(DataParallelRanks, CompressedAllreduceEqualsTheSimulation) {
  for (int world : {2, 3, 4}) expect_all(run_dp_peers(world, {"allreduce"}), 0, "world " + std::to_string(world));
}

TEST(DataParallelRanks, WarmupEqualsTheSingleProcessOptimizers) {
  expect_all(run_dp_peers(2, {"warmup"}), 0, "warmup");
}

TEST(DataParallelRanks, FreezeOnEveryRankAndRanksStayIdentical) {
  for (int world : {2, 4}) expect_all(run_dp_peers(world, {"freeze"}), 0, "world " + std::to_string(world));
}

TEST(DataParallelRanks, CheckpointResumesBitForBit) {
  const std::string dir = files::temp_directory() + "/actkit-dp-resume-" + std::to_string(getpid());
  files::create_directories(dir);
  expect_all(run_dp_peers(3, {"resume", dir}), 0, "resume");
  files::remove_all(dir);
}

TEST(DataParallelRanks, NonFiniteOnOneRankSkipsEverywhere) { expect_all(run_dp_peers(3, {"nan"}), 0, "nan"); }

TEST(DataParallelRanks, DeadRankIsNamedWithinTheTimeout) {
  const auto t0 = Clock::now();
  const auto results = run_dp_peers(3, {"dead"}, 5);
  EXPECT_EQ(results[0].exit_status, 3);
  EXPECT_EQ(results[1].exit_status, 3);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
}

TEST(DataParallelRanks, MismatchedSettingsAreRefusedOnEveryRank) {
  expect_all(run_dp_peers(3, {"mismatch"}), 3, "mismatch");
}

}  // namespace
}  // namespace actkit
