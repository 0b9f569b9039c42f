// Level presets and per-switch overrides; the controller's per-layer budgets.
#include <gtest/gtest.h>

#include "actkit/core/errors.h"
#include "actkit/core/controller.h"
#include "actkit/core/device.h"
#include "actkit/core/level.h"

#include <ATen/ATen.h>

using namespace actkit;

TEST(Level, PresetsFollowTheLevelTable) {
  const LevelConfig l0 = level_preset("L0");
  EXPECT_FALSE(l0.compresses_anything());
  const LevelConfig l1 = level_preset("l1");
  EXPECT_TRUE(l1.compress_conv);
  EXPECT_FALSE(l1.compress_norm || l1.compress_linear || l1.compress_activation);
  EXPECT_EQ(l1.bits, 4);
  const LevelConfig l2 = level_preset("L2");
  EXPECT_TRUE(l2.compress_conv && l2.compress_linear && l2.compress_norm && l2.compress_activation);
  EXPECT_FALSE(l2.mixed_precision);
  const LevelConfig l3 = level_preset("L3");
  EXPECT_EQ(l3.bits, 2);
  EXPECT_TRUE(l3.mixed_precision);
  EXPECT_EQ(level_preset("L4").swap, SwapTarget::kHost);
  EXPECT_TRUE(level_preset("L5").defrag_allocator);
  EXPECT_EQ(l0.gradients, GradientMemory::kAuto);
  EXPECT_EQ(level_preset("L5").gradients, GradientMemory::kAuto);
}

TEST(Level, OverridesChangeOneSwitchEach) {
  const LevelConfig c = parse_level("L3:bits=1.5,group_size=128,norm=false,swap=file");
  EXPECT_EQ(c.level, "L3");
  EXPECT_EQ(c.bits, 1.5);
  EXPECT_EQ(c.group_size, 128);
  EXPECT_FALSE(c.compress_norm);
  EXPECT_TRUE(c.compress_conv);
  EXPECT_EQ(c.swap, SwapTarget::kFile);
  EXPECT_EQ(parse_level("L0:conv=true").bits, 4);
  EXPECT_EQ(parse_level("L3:grads=drop").gradients, GradientMemory::kDrop);
  EXPECT_EQ(parse_level("L0:grads=KEEP").gradients, GradientMemory::kKeep);
  EXPECT_EQ(parse_level("L0:grads=keep,grads=auto").gradients, GradientMemory::kAuto);
  EXPECT_EQ(describe(parse_level("L0:grads=keep")), "L0 (fp32 grads=keep)");
}

TEST(Level, PieceSizeFollowsTheDevice) {
  const LevelConfig l3 = parse_level("L3");
  EXPECT_EQ(l3.chunk_bytes, kChunkBytesAuto);
  EXPECT_EQ(chunk_bytes_for(l3, at::kCPU), int64_t(16) << 20);
  EXPECT_EQ(chunk_bytes_for(parse_level("L3:chunk_bytes=1M"), at::kCPU), int64_t(1) << 20);
  EXPECT_EQ(chunk_bytes_for(parse_level("L3:chunk_bytes=0"), at::kCUDA), 0);  // set: no device asked
  EXPECT_EQ(parse_level("L3:chunk_bytes=1M,chunk_bytes=auto").chunk_bytes, kChunkBytesAuto);
  if (cuda_available()) {
    EXPECT_GE(chunk_bytes_for(l3, at::kCUDA), device_total_bytes(at::kCUDA) / 32);
  } else {
    EXPECT_THROW(chunk_bytes_for(l3, at::kCUDA), InvalidInput);
  }
  EXPECT_THROW(parse_level("L3:chunk_bytes=most"), InvalidInput);
}

TEST(Level, BadSpecsAreClearErrors) {
  EXPECT_THROW(level_preset("L6"), InvalidInput);
  EXPECT_THROW(level_preset("fast"), InvalidInput);
  EXPECT_THROW(parse_level("L2:bits=1.5"), InvalidInput);  // fractional needs mixed precision
  EXPECT_THROW(parse_level("L3:bits=9"), InvalidInput);
  EXPECT_THROW(parse_level("L3:bits=two"), InvalidInput);
  EXPECT_THROW(parse_level("L3:group_size=100"), InvalidInput);
  EXPECT_THROW(parse_level("L3:colour=red"), InvalidInput);
  EXPECT_THROW(parse_level("L3:conv"), InvalidInput);
  EXPECT_THROW(parse_level("L3:swap=tape"), InvalidInput);
  EXPECT_THROW(parse_level("L3:grads=sometimes"), InvalidInput);
  try {
    parse_level("L3:swap=tape");
  } catch (const InvalidInput& e) {  // the error lists what would have been accepted
    EXPECT_NE(std::string(e.what()).find("swap=tape: expected one of none, host, file"), std::string::npos) << e.what();
  }
}

namespace actkit {
namespace {

// Mixed precision moves bits towards the layer whose output gradient is
// larger (ActNN's per-layer allocation): gradients recorded in backward are
// folded in at step(), in the order they came.
TEST(Level, ParsedOnceWithTheCanonicalSpelling) {
  // Presets in any case are the same level, and say so the same way.
  for (const char* spelling : {"L3", "l3"}) {
    const LevelConfig c = parse_level(spelling);
    EXPECT_EQ(c.level, "L3");
    EXPECT_EQ(c.spec, "L3");
  }
  const LevelConfig o = parse_level("l4:prefetch=2");
  EXPECT_EQ(o.spec, "L4:prefetch=2");
  EXPECT_EQ(o.prefetch, 2);
  EXPECT_EQ(level_preset("l5").spec, "L5");
}

TEST(Level, ListsKeepEachLevelsOverridesTogether) {
  const std::vector<LevelConfig> l = parse_level_list("L0,l3:bits=1.5,group_size=128,L5,L4:prefetch=0");
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].spec, "L0");
  EXPECT_EQ(l[1].spec, "L3:bits=1.5,group_size=128");
  EXPECT_DOUBLE_EQ(l[1].bits, 1.5);
  EXPECT_EQ(l[1].group_size, 128);
  EXPECT_TRUE(l[2].defrag_allocator);
  EXPECT_EQ(l[3].prefetch, 0);
  EXPECT_THROW(parse_level_list(""), InvalidInput);
  EXPECT_THROW(parse_level_list(",,"), InvalidInput);
  EXPECT_THROW(parse_level_list("L0,L9"), InvalidInput);
  EXPECT_THROW(parse_level_list("bits=2"), InvalidInput);  // overrides with no level
  const std::vector<LevelConfig> spaced = parse_level_list("L0, l3 ,L2,bits=8");
  ASSERT_EQ(spaced.size(), 3u);
  EXPECT_EQ(spaced[1].spec, "L3");
  EXPECT_EQ(spaced[2].spec, "L2:bits=8");
  EXPECT_DOUBLE_EQ(spaced[2].bits, 8);
}

TEST(ControllerBudgets, FollowTheRecordedGradients) {
  Controller c(parse_level("L3"), 5);
  const int loud = c.register_layer("loud", LayerKind::kLinear);
  const int quiet = c.register_layer("quiet", LayerKind::kLinear);
  at::manual_seed(0);
  for (int iteration = 0; iteration < 3; ++iteration) {
    const at::Tensor x = at::randn({8, 512});
    const SavedActivation a = c.save(loud, x);
    const SavedActivation b = c.save(quiet, x * 1.0001);  // same ranges, not shared
    c.record_gradient(quiet, at::full({8, 16}, 0.01));
    c.record_gradient(loud, at::full({8, 16}, 10.0));
    c.step();
  }
  EXPECT_GT(c.layer_bits(loud), c.layer_bits(quiet) + 0.5);
  EXPECT_NEAR((c.layer_bits(loud) + c.layer_bits(quiet)) / 2, 2.0, 1e-9);
  EXPECT_EQ(c.stats().iterations, 3);
  // Without step() calls the recorded norms do not pile up (folded in early).
  for (int i = 0; i < 10000; ++i) c.record_gradient(loud, at::ones({2, 2}));
  EXPECT_THROW(c.record_gradient(99, at::ones({2, 2})), InvalidInput);
}

}  // namespace
}  // namespace actkit
