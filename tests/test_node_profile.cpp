// The backward node profile behind `actkit memory --nodes`.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/core/errors.h"
#include "memory_bench.h"
#include "node_profile.h"
#include "training_setup.h"

namespace actkit::bench {
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
  MemoryBenchConfig c;
  c.model = "resnet18";
  c.batch = 2;
  c.length = 32;
  c.levels = {"L3"};
  c.steps = 1;
  c.per_node = true;
  const auto results = run_memory_bench(c);
  ASSERT_EQ(results.size(), 1u);
  const StepMeasurement& m = results[0];
  ASSERT_FALSE(m.nodes.empty());
  EXPECT_GT(m.forward_peak_bytes, 0);
  bool conv = false;
  for (const NodePeak& n : m.nodes) conv = conv || n.name == "ConvFunction";
  EXPECT_TRUE(conv) << "compressed convolutions appear under their Function's name";
}

TEST(TrainingSetup, ClearingGradientsFreesThemAndTheNextStepMatches) {
  TrainingSetup a = make_training_setup("resnet18", {}, 32, 2, "L0", 3);
  TrainingSetup b = make_training_setup("resnet18", {}, 32, 2, "L0", 3);
  for (int s = 0; s < 2; ++s) {
    a.step();  // gradients dropped before each step
    b.optimizer->zero_grad();  // gradients zeroed in place
    b.model->loss(b.input, b.model->forward(b.input), b.labels).backward();
    b.optimizer->step();
  }
  clear_gradients(*a.optimizer);
  const auto pa = a.model->parameters();
  const auto pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_FALSE(pa[i].grad().defined());
    EXPECT_TRUE(at::equal(pa[i], pb[i])) << "parameter " << i;
  }
}

TEST(NodeProfile, RefusesATensorWithoutGradient) {
  ScopedCpuTracking tracking;
  EXPECT_THROW(BackwardProfile(at::ones({2}), tracking_probe(tracking.tracker())), InvalidInput);
}

}  // namespace
}  // namespace actkit::bench
