// What a boundary sends: the user's codec choice turned into both
// directions' codecs (and the combinations refused), and error feedback,
// whose sent values must sum to the true values up to one residual.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "actkit/core/errors.h"
#include "actkit/pipeline/boundary_codec.h"
#include "actkit/pipeline/error_feedback.h"
#include "actkit/pipeline/pipeline_config.h"

using namespace actkit;
using pipeline::BoundaryChoice;
using pipeline::BoundaryCodec;

namespace {

BoundaryChoice choice(const std::string& codec, int fw, int bw) {
  BoundaryChoice c;
  c.codec = codec;
  c.fw_bits = fw;
  c.bw_bits = bw;
  return c;
}

}  // namespace

TEST(BoundaryChoice, OptionsReachTheDirectionsTheyNameAndNoOther) {
  BoundaryChoice c = choice("directq", 2, 4);
  c.stochastic = true;
  c.grid = pipeline::DirectQGrid::kFull;
  c.fw_per_channel = true;
  c.bw_per_channel = true;
  auto codecs = pipeline::boundary_codecs(c);
  EXPECT_EQ(codecs.forward.describe(), "directq2-sr-channel-full");
  // Gradients stay on the symmetric grid: a zero gradient stays zero.
  EXPECT_EQ(codecs.backward.describe(), "directq4-sr-channel");

  c = choice("aqsgd", 3, 6);
  c.grid = pipeline::DirectQGrid::kFull;
  codecs = pipeline::boundary_codecs(c);
  EXPECT_EQ(codecs.forward.describe(), "aqsgd3-full");
  EXPECT_TRUE(codecs.forward.per_channel);

  c = choice("tah", 4, 6);
  c.tah_group = 32;
  c.tah_high_fraction = 0.5;
  c.stochastic = true;  // both directions: TAH's tiles and the DirectQ gradients
  codecs = pipeline::boundary_codecs(c);
  EXPECT_EQ(codecs.forward.describe(), "tah4/3-sr-g32-p0.5");
  EXPECT_TRUE(codecs.forward.stochastic);
  EXPECT_TRUE(codecs.backward.stochastic);

  // Defaults describe themselves as before the options existed (checkpoints compare these texts).
  EXPECT_EQ(pipeline::boundary_codecs(choice("directq", 4, 8)).forward.describe(), "directq4");
  EXPECT_EQ(pipeline::boundary_codecs(choice("tah", 4, 6)).forward.describe(), "tah4/3-g64-p0.8");
  EXPECT_EQ(pipeline::boundary_codecs(choice("aqsgd", 2, 8)).forward.describe(), "aqsgd2");
}

TEST(BoundaryChoice, OptionsACodecDoesNotHaveAreRefused) {
  auto refused = [](BoundaryChoice c, const std::string& needle) {
    try {
      pipeline::boundary_codecs(c);
      ADD_FAILURE() << needle << ": accepted";
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  BoundaryChoice c = choice("tah", 4, 6);
  c.grid = pipeline::DirectQGrid::kFull;
  refused(c, "--grid");
  c = choice("aqsgd", 2, 8);
  c.fw_per_channel = true;
  refused(c, "--scale");
  c = choice("fp16", 0, 0);
  c.bw_per_channel = true;
  refused(c, "--bw-scale");
  c = choice("directq", 4, 8);
  c.tah_group = 32;
  refused(c, "--tah-tile");
  for (int g : {4, 48, 512}) {
    c = choice("tah", 4, 6);
    c.tah_group = g;
    refused(c, "power of two");
  }
  c = choice("tah", 4, 6);
  c.tah_high_fraction = 1.5;
  refused(c, "--tah-high-share");
  c = choice("aqsgd", 2, 8);
  c.tah_group = 64;  // the default, but given: still not an aqsgd option
  refused(c, "--tah-tile");
  c = choice("fp16", 0, 0);
  c.stochastic = true;
  refused(c, "rounds nothing");
  c = choice("directq", 9, 8);
  refused(c, "2..8");
  EXPECT_THROW(pipeline::parse_directq_grid("wide"), InvalidInput);
  EXPECT_THROW(pipeline::parse_tied_gradient("fp8"), InvalidInput);
}

TEST(ErrorFeedback, NeedsALossyGradientCodecAndTwoStages) {
  pipeline::PipelineConfig c;
  c.buffers.dir = "unused";
  const pipeline::BoundaryCodecs codecs = pipeline::boundary_codecs(choice("directq", 4, 4));
  c.forward_codec = codecs.forward;
  c.backward_codec = codecs.backward;
  c.backward_feedback = true;
  EXPECT_NO_THROW(c.validate());
  c.stages = 1;
  EXPECT_THROW(c.validate(), InvalidInput);
  c.stages = 2;
  c.backward_feedback = false;
  c.tied_gradient = pipeline::TiedGradient::kFp32;
  EXPECT_NO_THROW(c.validate());
  c.stages = 1;
  EXPECT_THROW(c.validate(), InvalidInput);
  c.stages = 2;
  c.tied_gradient = pipeline::TiedGradient::kFeedback;
  c.backward_codec = pipeline::parse_boundary_codec("fp32", 0);
  EXPECT_THROW(c.validate(), InvalidInput);
}

TEST(ErrorFeedback, WhatWasSentSumsToWhatThereWasUpToOneResidual) {
  // A gradient that repeats with a small bias (the slot's examples change,
  // the statistics do not): 2-bit round-to-nearest loses the bias every
  // step without feedback, and keeps it with feedback.
  const BoundaryCodec codec = pipeline::parse_boundary_codec("directq", 2);
  const at::Tensor bias = at::full({4, 8, 32}, 0.05f);
  pipeline::ErrorFeedback feedback;
  at::Tensor sent = at::zeros_like(bias, at::kDouble), plain = at::zeros_like(bias, at::kDouble);
  at::Tensor truth = at::zeros_like(bias, at::kDouble);
  constexpr int kSteps = 400;
  for (int t = 0; t < kSteps; ++t) {
    const at::Tensor g = at::randn({4, 8, 32}) + bias;
    at::Tensor seen;
    const auto bytes = feedback.encode("gradients/0", g, codec, uint64_t(t), &seen);
    EXPECT_TRUE(at::equal(seen, pipeline::decode_boundary(bytes, "b"))) << "decoded is what travels";
    sent += seen.to(at::kDouble);
    plain += pipeline::decode_boundary(pipeline::encode_boundary(g, codec, 0), "b").to(at::kDouble);
    truth += g.to(at::kDouble);
  }
  const at::Tensor residual = feedback.residuals().at("gradients/0").to(at::kDouble);
  // Exactly: sent = truth - residual, up to fp32 rounding of the sums.
  EXPECT_LT((sent + residual - truth).abs().max().item<double>(), 1e-3);
  // The residual is at most one step of the last send (about max|g| / 1
  // level at 2 bits): bounded, while the plain error grows with the steps.
  EXPECT_LT(residual.abs().max().item<double>(), 6.0);
  const double with = (sent - truth).abs().mean().item<double>(), without = (plain - truth).abs().mean().item<double>();
  EXPECT_LT(with * 4, without) << with << " vs " << without;
  EXPECT_GT(feedback.residual_norm_squared(), 0);
}

TEST(ErrorFeedback, SlotsAreIndependentAndAShapeChangeStartsAfresh) {
  const BoundaryCodec codec = pipeline::parse_boundary_codec("directq", 3);
  pipeline::ErrorFeedback feedback;
  const at::Tensor a = at::randn({2, 16}), b = at::randn({2, 16});
  feedback.encode("gradients/0", a, codec, 1);
  feedback.encode("gradients/1", b, codec, 1);
  ASSERT_EQ(feedback.residuals().size(), 2u);
  // A fresh sender of the same tensor in slot 1 sends what slot 1 did.
  pipeline::ErrorFeedback fresh;
  EXPECT_EQ(fresh.encode("gradients/1", b, codec, 1), pipeline::encode_boundary(b, codec, 1));
  // Another shape: no residual is added (the first send of that shape).
  const at::Tensor c = at::randn({3, 16});
  EXPECT_EQ(feedback.encode("gradients/0", c, codec, 2), pipeline::encode_boundary(c, codec, 2));
  // A residual restored is the one used next; bad ones are refused.
  std::map<std::string, at::Tensor> saved = feedback.residuals();
  pipeline::ErrorFeedback resumed;
  resumed.restore(saved);
  EXPECT_EQ(resumed.encode("gradients/1", a, codec, 3), feedback.encode("gradients/1", a, codec, 3));
  saved["gradients/0"] = at::full({3, 16}, NAN);
  EXPECT_THROW(resumed.restore(saved), InvalidInput);
  saved["gradients/0"] = at::zeros({3, 16}, at::kDouble);
  EXPECT_THROW(resumed.restore(saved), InvalidInput);
  // NaN in the gradient: refused by the codec, the residual left as it was.
  const at::Tensor before = feedback.residuals().at("gradients/1").clone();
  at::Tensor bad = a.clone();
  bad[0][0] = NAN;
  EXPECT_THROW(feedback.encode("gradients/1", bad, codec, 4), InvalidInput);
  EXPECT_TRUE(at::equal(before, feedback.residuals().at("gradients/1")));
}
