// The max-batch search: a probe that runs out of memory must not affect the
// next one, and the answer must sit exactly on the boundary it measured.
#include <gtest/gtest.h>

#include "actkit/core/errors.h"
#include "actkit/app/maxbatch_search.h"

namespace actkit {
namespace {

TEST(MaxBatch, FindsTheBoundaryAndCompressionRaisesIt) {
  app::MaxBatchConfig c;
  c.model = "resnet18";
  c.options.num_classes = 10;
  c.length = 16;
  c.levels = parse_level_list("L0,L3");
  c.budget = 170 << 20;  // ResNet-18 weights, gradients and momentum take about 140 MiB
  c.limit = 128;
  const auto results = app::run_maxbatch(c, nullptr);
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
  app::MaxBatchConfig c;
  c.budget = 1000;
  EXPECT_THROW(app::run_maxbatch(c, nullptr), InvalidInput);
  c = {};
  c.levels = {};
  EXPECT_THROW(app::run_maxbatch(c, nullptr), InvalidInput);
  c = {};
  c.model = "resnet19";
  EXPECT_THROW(app::run_maxbatch(c, nullptr), InvalidInput);
  // On CUDA the defrag levels need the CUDA defrag allocator, which serves
  // the whole process: L0 and L5 together are refused before any work,
  // whatever the build.
  c = {};
  c.device = "cuda";
  c.levels = parse_level_list("L0,L5");
  EXPECT_THROW(app::run_maxbatch(c, nullptr), InvalidInput);
}

}  // namespace
}  // namespace actkit
