// The CUDA defrag allocator (L5 on GPUs). LibTorch's CUDA allocator can be
// swapped only before the first CUDA allocation, so this file is its own
// test program: main() installs the allocator first when the build and the
// machine allow, and each test runs in its own process. On CPU-only builds
// only the "missing" behaviour is checked.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "actkit/allocator/cuda_allocator.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/measure/training_setup.h"

using namespace actkit;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

#define REQUIRE_INSTALLED() \
  if (!cuda_defrag_allocator_installed()) GTEST_SKIP() << "no CUDA device, or a build without the CUDA allocator"

// Fills `t` (int32) with a pattern that names it.
void stamp(at::Tensor& t, int32_t id) { t.copy_(at::arange(t.numel(), t.options()).add_(id)); }
bool stamped(const at::Tensor& t, int32_t id) { return at::equal(t, at::arange(t.numel(), t.options()).add_(id)); }

}  // namespace

TEST(CudaDefragAllocator, BuildWithoutItSaysSo) {
  if (cuda_defrag_allocator_supported()) GTEST_SKIP() << "this build has the CUDA allocator";
  EXPECT_FALSE(cuda_defrag_allocator_installed());
  EXPECT_THROW(install_cuda_defrag_allocator(), InvalidInput);
  EXPECT_THROW(cuda_defrag_allocator_stats(0), InvalidInput);
}

TEST(CudaDefragAllocator, SecondInstallWithAnotherLimitIsRefused) {
  REQUIRE_INSTALLED();
  EXPECT_NO_THROW(install_cuda_defrag_allocator());  // same limit: nothing to do
  EXPECT_THROW(install_cuda_defrag_allocator(int64_t(1) << 30), InvalidInput);
}

// Random sizes (0 to 40 MiB) allocated and freed at random: every surviving
// tensor keeps its contents, and the allocated bytes follow the tensors.
TEST(CudaDefragAllocator, RandomTensorsKeepTheirContents) {
  REQUIRE_INSTALLED();
  const int64_t before = cuda_defrag_allocator_stats(0).allocated;
  std::mt19937_64 rng(7);
  std::vector<std::pair<at::Tensor, int32_t>> live;
  for (int32_t op = 0; op < 400; ++op) {
    if (!live.empty() && rng() % 100 < 45) {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(stamped(live[i].first, live[i].second)) << "op " << op;
      live[i] = live.back();
      live.pop_back();
    } else {
      const uint64_t r = rng() % 100;
      const int64_t bytes = int64_t(r < 60 ? rng() % 70000 : r < 90 ? rng() % (3 * kMiB) : rng() % (40 * kMiB));
      at::Tensor t = at::empty({bytes / 4}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
      stamp(t, op);
      live.emplace_back(std::move(t), op);
    }
  }
  int64_t live_bytes = 0;
  for (auto& [t, id] : live) {
    EXPECT_TRUE(stamped(t, id));
    live_bytes += int64_t(t.nbytes());
  }
  synchronize(at::kCUDA);
  EXPECT_GE(cuda_defrag_allocator_stats(0).allocated - before, live_bytes);
  live.clear();
  EXPECT_EQ(cuda_defrag_allocator_stats(0).allocated, before);
}

// Past the limit LibTorch's own out-of-memory error comes back, and the next
// allocation works.
TEST(CudaDefragAllocator, OutOfMemoryIsLibTorchsAndRecoverable) {
  REQUIRE_INSTALLED();
  const auto options = at::TensorOptions().dtype(at::kByte).device(at::kCUDA);
  EXPECT_THROW(at::empty({int64_t(1) << 42}, options), c10::OutOfMemoryError);  // 4 TiB
  at::Tensor ok = at::ones({16 * kMiB}, options);
  EXPECT_EQ(ok.sum().item<int64_t>(), 16 * kMiB);
  EXPECT_GE(cuda_defrag_allocator_stats(0).out_of_memory, 1);
}

// The space freed between live blocks goes back to the device: after
// freeing every other 8 MiB tensor and emptying the cache, the allocator
// holds what the live tensors touch -- their 80 MiB and at most one granule
// more each, when earlier small blocks shifted them off granule boundaries
// (a caching allocator keeps all 160 MiB) -- and a 64 MiB tensor takes only
// its own memory.
TEST(CudaDefragAllocator, FreedSpaceBetweenBlocksGoesBack) {
  REQUIRE_INSTALLED();
  const auto options = at::TensorOptions().dtype(at::kByte).device(at::kCUDA);
  release_device_cache(at::kCUDA);
  const BlockStats start = cuda_defrag_allocator_stats(0);
  std::vector<at::Tensor> blocks;
  for (int i = 0; i < 20; ++i) blocks.push_back(at::empty({8 * kMiB}, options));
  for (size_t i = 0; i < blocks.size(); i += 2) blocks[i] = at::Tensor();
  release_device_cache(at::kCUDA);
  const BlockStats half = cuda_defrag_allocator_stats(0);
  EXPECT_EQ(half.allocated - start.allocated, 80 * kMiB);
  EXPECT_LE(half.reserved - start.reserved, 80 * kMiB + 10 * 2 * kMiB);
  at::Tensor big = at::empty({64 * kMiB}, options);
  const BlockStats after = cuda_defrag_allocator_stats(0);
  EXPECT_LE(after.reserved - half.reserved, 64 * kMiB + 4 * kMiB);
}

// device_memory_stats() and friends answer from the installed allocator.
TEST(CudaDefragAllocator, DeviceMemoryCallsReportIt) {
  REQUIRE_INSTALLED();
  at::Tensor t = at::empty({32 * kMiB}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  const BlockStats s = cuda_defrag_allocator_stats(0);
  const DeviceMemoryStats d = device_memory_stats(at::kCUDA);
  EXPECT_EQ(d.allocated_bytes, s.allocated);
  EXPECT_EQ(d.reserved_bytes, s.reserved);
  reset_device_peaks(at::kCUDA);
  EXPECT_EQ(cuda_defrag_allocator_stats(0).peak_allocated, s.allocated);
}

// A converted ResNet trains at L5 on the device under it: two steps, a
// finite loss, and everything but the model's state freed afterwards.
TEST(CudaDefragAllocator, TrainsAResNetAtL5) {
  REQUIRE_INSTALLED();
  const int64_t before = cuda_defrag_allocator_stats(0).allocated;
  {
    TrainingSetup t = make_training_setup("resnet18", ModelOptions{}, 32, 16, parse_level("L5"), 3, at::kCUDA);
    t.step();
    t.step();
    const at::Tensor loss = t.model->loss(t.input, t.model->forward(t.input), t.labels);
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    synchronize(at::kCUDA);
    const BlockStats s = cuda_defrag_allocator_stats(0);
    EXPECT_GT(s.peak_allocated, before);
    EXPECT_LE(s.fragmentation(), 0.5);  // loose: a short run; the benchmarks measure it
  }
  synchronize(at::kCUDA);
  EXPECT_LE(cuda_defrag_allocator_stats(0).allocated - before, 128 * kMiB);  // cuBLAS workspaces stay
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // Before anything allocates on the device.
  if (cuda_defrag_allocator_supported() && cuda_available()) install_cuda_defrag_allocator();
  return RUN_ALL_TESTS();
}
