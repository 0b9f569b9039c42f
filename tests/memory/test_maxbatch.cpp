// The max-batch search: a probe that runs out of memory must not affect the
// next one, and the answer must sit exactly on the boundary it measured.
#include <gtest/gtest.h>

#include "actkit/core/errors.h"
#include "actkit/measure/level_switches.h"
#include "actkit/measure/maxbatch_search.h"

namespace actkit {
namespace {

TEST(MaxBatch, FindsTheBoundaryAndCompressionRaisesIt) {
  MaxBatchConfig c;
  c.model = "resnet18";
  c.options.num_classes = 10;
  c.length = 16;
  c.levels = parse_level_list("L0,L3");
  c.budget = 170 << 20;  // ResNet-18 weights, gradients and momentum take about 140 MiB
  c.limit = 128;
  const auto results = run_maxbatch(c, nullptr);
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) {
    ASSERT_GT(r.max_batch, 0) << r.level;
    EXPECT_GT(r.throughput, 0) << r.level;
    for (const auto& p : r.probes) {
      // Every batch up to the answer fitted and every larger one did not.
      EXPECT_EQ(p.fits, p.batch <= r.max_batch) << r.level << " batch " << p.batch;
      if (p.fits) EXPECT_LE(p.peak_reserved, c.budget);
      if (p.fits) EXPECT_LE(p.peak_allocated, p.peak_reserved);
    }
  }
  EXPECT_GT(results[1].max_batch, results[0].max_batch);
}

TEST(MaxBatch, BadConfigurationsAreClearErrors) {
  MaxBatchConfig c;
  c.budget = 1000;
  EXPECT_THROW(run_maxbatch(c, nullptr), InvalidInput);
  c = {};
  c.levels = {};
  EXPECT_THROW(run_maxbatch(c, nullptr), InvalidInput);
  c = {};
  c.model = "resnet19";
  EXPECT_THROW(run_maxbatch(c, nullptr), InvalidInput);
  // On CUDA the defrag levels need the CUDA defrag allocator, which serves
  // the whole process: L0 and L5 together are refused before any work,
  // whatever the build.
  c = {};
  c.device = "cuda";
  c.levels = parse_level_list("L0,L5");
  EXPECT_THROW(run_maxbatch(c, nullptr), InvalidInput);
}

// One CUDA allocator serves a process, so levels that disagree on the defrag
// switch are refused by the level check itself, before anything is
// installed or touches the device (runs without a GPU too).
TEST(LevelSwitches, LevelsThatDisagreeOnTheAllocatorAreRefusedOnCuda) {
  try {
    apply_level_switches(parse_level_list("L0,L5"), at::Device(at::kCUDA));
    ADD_FAILURE() << "L0 and L5 in one CUDA process must be refused";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("process of their own"), std::string::npos) << e.what();
  }
  // On the CPU the switch is the budget allocator's policy, per level.
  EXPECT_NO_THROW(apply_level_switches(parse_level_list("L0,L5"), at::kCPU));
  EXPECT_EQ(level_allocator(parse_level("L5"), at::kCPU, "caching"), "defrag");
  EXPECT_EQ(level_allocator(parse_level("L3"), at::kCPU, "caching"), "caching");
  EXPECT_EQ(level_allocator(parse_level("L5"), at::Device(at::kCUDA), "caching"), "cuda defrag");
}

}  // namespace
}  // namespace actkit
