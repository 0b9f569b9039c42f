// The controller's bit budgets: what a level asks for (`bits`, an average
// per saved value) is what the saved payloads hold, with mixed precision
// moving bits between samples, layers and the tensors one layer saves.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "actkit/converters/convert.h"
#include "actkit/core/controller.h"
#include "actkit/core/errors.h"
#include "actkit/models/zoo.h"

using namespace actkit;

namespace {

// Average code bits per value of what the controller quantized between two
// stats snapshots (metadata excluded, as `bits` counts it).
double average_bits(const ControllerStats& before, const ControllerStats& after) {
  const int64_t values = after.quantized_values - before.quantized_values;
  return values == 0 ? 0.0 : double(after.code_bits - before.code_bits) / double(values);
}

}  // namespace

// A GPT-2 block's attention saves p (B x H x T x T) and v (B x H x T x d)
// under one layer: at T = 64, d = 16 p is four times v. Each must be priced
// at its own size in the per-layer re-allocation, or the budgets step()
// hands out cost more than the level's average when forward realises them.
TEST(BitBudgets, Gpt2StepsStoreAtMostTheRequestedAverage) {
  for (const double bits : {2.0, 1.5}) {
    ModelOptions o;
    o.vocab_size = 101;
    o.max_positions = 64;
    o.layers = 2;
    o.hidden = 64;
    o.heads = 4;
    auto model = make_model("gpt2", o);
    const ConvertResult r = convert(*model, "L3:bits=" + std::to_string(bits), 3);
    model->train();
    at::manual_seed(0);
    const at::Tensor x = model->example_input(4, 64);
    const at::Tensor labels = model->example_labels(x);
    double last = 0;
    for (int step = 0; step < 4; ++step) {
      const ControllerStats before = r.controller->stats();
      model->loss(x, model->forward(x), labels).backward();
      last = average_bits(before, r.controller->stats());
      r.controller->step();
      EXPECT_LE(last, bits + 1e-9) << "bits=" << bits << ", step " << step;
    }
    // The greedy allocation spends nearly all of it.
    EXPECT_GT(last, bits - 0.1) << "bits=" << bits;
  }
}

// The two operands of one layer (slots 0 and 1) of very different sizes:
// after step() the next iteration's payloads still average at most `bits`.
TEST(BitBudgets, TensorsOfOneLayerArePricedAtTheirOwnSize) {
  Controller c(parse_level("L3"), 5);
  const int mm = c.register_layer("context", LayerKind::kLinear);
  const int other = c.register_layer("proj", LayerKind::kLinear);
  at::manual_seed(0);
  double realised = 0;
  for (int iteration = 0; iteration < 3; ++iteration) {
    const ControllerStats before = c.stats();
    const at::Tensor a = at::randn({8, 4096}) * 4;  // large, wide ranges: saved first
    const at::Tensor b = at::rand({8, 256});         // small, narrow ranges: saved last
    const at::Tensor h = at::randn({8, 1024});
    const SavedActivation sa = c.save(mm, a, 1.0, 0);
    const SavedActivation sb = c.save(mm, b, 1.0, 1);
    const SavedActivation sh = c.save(other, h);
    realised = average_bits(before, c.stats());
    EXPECT_LE(realised, 2.0 + 1e-9) << "iteration " << iteration;
    c.record_gradient(mm, at::ones({8, 16}));
    c.record_gradient(other, at::ones({8, 16}));
    c.step();
  }
  EXPECT_GT(realised, 1.9);
  EXPECT_THROW(c.save(mm, at::randn({2, 8}), 1.0, 4), InvalidInput);
  EXPECT_THROW(c.save(mm, at::randn({2, 8}), 1.0, -1), InvalidInput);
}

// A tensor that cannot be split by sample (a batch of one, rank 1) is
// stored at one width per call; over calls a fractional budget is met on
// average, never exceeded, rather than rounded to the nearest integer.
TEST(BitBudgets, FractionalBudgetIsHonouredWithoutSamplesToSplit) {
  Controller c(parse_level("L3:bits=1.5"), 5);
  const int layer = c.register_layer("single", LayerKind::kLinear);
  const ControllerStats start = c.stats();
  at::manual_seed(0);
  for (int call = 0; call < 10; ++call) {
    const at::Tensor x = call % 2 == 0 ? at::randn({1, 3000}) : at::randn({3000});
    const ControllerStats before = c.stats();
    const CompressedTensor ct = c.save(layer, x).load();
    EXPECT_TRUE(ct.bits() == 1 || ct.bits() == 2) << "call " << call << ": " << ct.bits() << " bits";
    const double running = average_bits(start, c.stats());
    EXPECT_LE(running, 1.5 + 1e-12) << "call " << call;
    EXPECT_GE(running, 1.5 - 0.5 / double(call + 1) - 1e-12) << "call " << call;
    EXPECT_GT(c.stats().code_bits, before.code_bits);
  }
  EXPECT_DOUBLE_EQ(average_bits(start, c.stats()), 1.5);
  // Calls of different sizes: the average over values stays within budget.
  const ControllerStats mid = c.stats();
  for (int64_t size : {100, 7000, 300, 50, 2000, 900}) (void)c.save(layer, at::randn({size}));
  EXPECT_LE(average_bits(mid, c.stats()), 1.5 + 1e-12);
  EXPECT_GE(average_bits(mid, c.stats()), 1.5 - 7000.0 / 10350.0);  // owes less than one call
}

// Integer budgets are what they were: one width, every call.
TEST(BitBudgets, IntegerBudgetsUseThatWidth) {
  Controller c(parse_level("L2:bits=3"), 5);
  const int layer = c.register_layer("l", LayerKind::kLinear);
  for (int call = 0; call < 3; ++call) EXPECT_EQ(c.save(layer, at::randn({1, 512})).load().bits(), 3);
  EXPECT_EQ(c.stats().code_bits, 3 * 3 * 512);
  EXPECT_EQ(c.stats().quantized_values, 3 * 512);
}

// layer_name() returns a copy: registering more layers (which may move the
// registry) leaves a name taken earlier intact.
TEST(BitBudgets, LayerNamesOutliveLaterRegistrations) {
  Controller c(parse_level("L3"), 5);
  const int first = c.register_layer("first layer with a name longer than the small-string buffer", LayerKind::kConv);
  const std::string name = c.layer_name(first);
  for (int i = 0; i < 100; ++i) c.register_layer("layer " + std::to_string(i), LayerKind::kLinear);
  EXPECT_EQ(name, "first layer with a name longer than the small-string buffer");
  EXPECT_EQ(c.layer_name(first), name);
  EXPECT_EQ(c.num_layers(), 101);
  EXPECT_THROW(c.layer_name(101), InvalidInput);
}
