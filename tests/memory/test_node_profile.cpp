// The backward node profile behind `actkit memory --nodes`.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/core/errors.h"
#include "actkit/core/gradients.h"
#include "actkit/measure/level_memory.h"
#include "actkit/measure/node_profile.h"
#include "actkit/measure/training_setup.h"

namespace actkit::app {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

MemoryProbe tracking_probe(TrackingAllocator& t) {
  return {[&t] { return t.current_bytes(); }, [&t] { return t.peak_bytes(); }, [&t] { t.reset_peak(); }};
}

TEST(NodeProfile, ListsEveryNodeInExecutionOrderWithWhatItAllocated) {
  ScopedCpuTracking tracking;
  const at::Tensor x = at::randn({kMiB / 4}).requires_grad_();  // 1 MiB
  const at::Tensor w = at::randn({kMiB / 4});
  const at::Tensor loss = (x.mul(2.0) * w).sum();
  BackwardProfile profile(loss, tracking_probe(tracking.tracker()));
  const std::vector<NodePeak> nodes = profile.run(loss);
  // SumBackward0, MulBackward0 (by w), MulBackward1 (by 2), AccumulateGrad.
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes.front().name, "SumBackward0");
  EXPECT_EQ(nodes.back().name, "AccumulateGrad");
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_EQ(nodes[i].order, int64_t(i));
    EXPECT_GE(nodes[i].peak, nodes[i].held_before);
  }
  // The multiplication by w forms a 1 MiB gradient for x * 2.
  EXPECT_EQ(nodes[1].name, "MulBackward0");
  EXPECT_GE(nodes[1].peak - nodes[1].held_before, kMiB);
  EXPECT_TRUE(x.grad().defined());
}

TEST(NodeProfile, NamesCompressedLayersByTheirFunction) {
  LevelMemoryConfig c;
  c.model = "resnet18";
  c.batch = 2;
  c.length = 32;
  c.levels = {parse_level("L3")};
  c.steps = 1;
  c.per_node = true;
  const auto results = measure_level_memory(c);
  ASSERT_EQ(results.size(), 1u);
  const StepMeasurement& m = results[0];
  ASSERT_FALSE(m.nodes.empty());
  EXPECT_GT(m.forward_peak_bytes, 0);
  bool conv = false;
  for (const NodePeak& n : m.nodes) conv = conv || n.name == "ConvFunction";
  EXPECT_TRUE(conv) << "compressed convolutions appear under their Function's name";
}

// Dropped and kept gradients train the same bits; a kept gradient keeps its
// storage from step to step (the point of keeping it), a dropped one is gone.
TEST(TrainingSetup, KeptAndDroppedGradientsTrainTheSameBits) {
  for (const char* level : {"L0", "L3"}) {
    SCOPED_TRACE(level);
    TrainingSetup drop = make_training_setup("resnet18", {}, 32, 2, parse_level(std::string(level) + ":grads=drop"), 3);
    TrainingSetup keep = make_training_setup("resnet18", {}, 32, 2, parse_level(std::string(level) + ":grads=keep"), 3);
    std::vector<const void*> storage;
    for (int s = 0; s < 3; ++s) {
      drop.step();
      keep.step();
      const auto params = keep.model->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (s == 0) storage.push_back(params[i].grad().data_ptr());
        EXPECT_EQ(params[i].grad().data_ptr(), storage[i]) << "kept gradient " << i << " moved in step " << s;
      }
    }
    const auto pd = drop.model->parameters();
    const auto pk = keep.model->parameters();
    ASSERT_EQ(pd.size(), pk.size());
    for (size_t i = 0; i < pd.size(); ++i) {
      EXPECT_TRUE(at::equal(pd[i], pk[i])) << "parameter " << i;
      EXPECT_TRUE(at::equal(pd[i].grad(), pk[i].grad())) << "gradient " << i;
    }
    EXPECT_FALSE(drop.converted.controller->reset_gradients(pd));
    EXPECT_TRUE(keep.converted.controller->reset_gradients(pk));
    for (size_t i = 0; i < pd.size(); ++i) {
      EXPECT_FALSE(pd[i].grad().defined());
      ASSERT_TRUE(pk[i].grad().defined());
      EXPECT_EQ(pk[i].grad().count_nonzero().item<int64_t>(), 0);
    }
  }
}

// auto: L0 drops; a compressing level keeps in the first step and then keeps
// only while a step saves at least the gradients' bytes in payloads.
TEST(TrainingSetup, AutomaticGradientsFollowTheSavedBytes) {
  TrainingSetup l0 = make_training_setup("resnet18", {}, 32, 2, parse_level("L0"), 3);
  EXPECT_FALSE(l0.converted.controller->reset_gradients(l0.model->parameters()));
  // ResNet-18 at 32x32, batch 2: payloads far below the 43 MiB of gradients.
  TrainingSetup small = make_training_setup("resnet18", {}, 32, 2, parse_level("L3"), 3);
  EXPECT_TRUE(small.converted.controller->reset_gradients(small.model->parameters()));
  small.step();
  EXPECT_FALSE(small.converted.controller->reset_gradients(small.model->parameters()));
  // A tiny transformer on a large batch: payloads outweigh the gradients.
  ModelOptions o;
  o.vocab_size = 100;
  o.max_positions = 64;
  o.layers = 1;
  o.hidden = 64;
  o.heads = 2;
  TrainingSetup big = make_training_setup("gpt2", o, 64, 64, parse_level("L3"), 3);
  const auto params = big.model->parameters();
  // Gradients a backward left behind, one allocation each, move into one
  // buffer once they are kept.
  big.model->loss(big.input, big.model->forward(big.input), big.labels).backward();
  ASSERT_FALSE(params.front().grad().is_alias_of(params.back().grad()));
  EXPECT_TRUE(big.converted.controller->reset_gradients(params));  // the first step keeps
  for (const auto& p : params) EXPECT_TRUE(p.grad().is_alias_of(params.front().grad()));
  big.step();  // its payloads include the extra forward above
  big.step();  // one forward's payloads
  const ControllerStats st = big.converted.controller->stats();
  EXPECT_GT(st.compressed_bytes / 3, gradient_bytes(params));
  EXPECT_TRUE(big.converted.controller->reset_gradients(params));
}

TEST(Gradients, KeepingAllocatesOneBufferAndSkipsFrozenParameters) {
  at::Tensor w = at::ones({4, 3}).requires_grad_();
  at::Tensor b = at::ones({5}).requires_grad_();
  at::Tensor frozen = at::ones({2});
  reset_gradients({w, frozen, b}, true);
  ASSERT_TRUE(w.grad().defined() && b.grad().defined());
  EXPECT_EQ(w.grad().sizes(), w.sizes());
  EXPECT_EQ(w.grad().count_nonzero().item<int64_t>() + b.grad().count_nonzero().item<int64_t>(), 0);
  EXPECT_TRUE(w.grad().is_alias_of(b.grad())) << "one buffer";
  EXPECT_FALSE(frozen.grad().defined());
  EXPECT_EQ(gradient_bytes({w, frozen, b}), 17 * 4);
  w.mutable_grad().fill_(2);
  reset_gradients({w}, true);
  EXPECT_EQ(w.grad().count_nonzero().item<int64_t>(), 0);
  reset_gradients({w, b}, false);
  EXPECT_FALSE(w.grad().defined() || b.grad().defined());
}

TEST(NodeProfile, RefusesATensorWithoutGradient) {
  ScopedCpuTracking tracking;
  EXPECT_THROW(BackwardProfile(at::ones({2}), tracking_probe(tracking.tracker())), InvalidInput);
}

}  // namespace
}  // namespace actkit::app
