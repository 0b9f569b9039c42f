// The tracking allocator counts exactly what LibTorch allocates on the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/converters/convert.h"
#include "actkit/models/zoo.h"

using namespace actkit;

TEST(TrackingAllocator, CountsAKnownTensorPattern) {
  ScopedCpuTracking tracking;
  TrackingAllocator& t = tracking.tracker();
  const int64_t base = t.current_bytes();
  t.reset_peak();
  {
    at::Tensor a = at::empty({1024}, at::kFloat);  // 4 KiB
    at::Tensor b = at::empty({256, 256}, at::kDouble);  // 512 KiB
    EXPECT_EQ(t.current_bytes() - base, 4096 + 524288);
    a = at::Tensor();
    EXPECT_EQ(t.current_bytes() - base, 524288);
    at::Tensor c = at::empty({3}, at::kByte);
    EXPECT_EQ(t.current_bytes() - base, 524288 + 3);
  }
  EXPECT_EQ(t.current_bytes(), base);
  EXPECT_EQ(t.peak_bytes() - base, 4096 + 524288);
}

TEST(TrackingAllocator, WorksThroughOneDnnAndRestoresThePreviousAllocator) {
  c10::Allocator* before = c10::GetCPUAllocator();
  {
    ScopedCpuTracking tracking;
    EXPECT_EQ(c10::GetCPUAllocator(), &TrackingAllocator::cpu());
    // Convolutions allocate through the raw interface.
    const at::Tensor y = at::conv2d(at::randn({2, 3, 16, 16}), at::randn({4, 3, 3, 3}));
    EXPECT_EQ(y.size(1), 4);
  }
  EXPECT_EQ(c10::GetCPUAllocator(), before);
}

TEST(TrackingAllocator, CompressedTrainingStepSavesActivationMemory) {
  auto measure = [](const std::string& level) {
    ScopedCpuTracking tracking;
    at::manual_seed(0);
    ModelOptions o;
    o.num_classes = 10;
    o.image_size = 32;
    auto model = make_model("resnet18", o);
    const ConvertResult r = convert(*model, level);
    const at::Tensor x = model->example_input(8, 32);
    const at::Tensor labels = model->example_labels(x);
    const int64_t before = tracking.tracker().current_bytes();
    at::Tensor out = model->forward(x);
    const at::Tensor loss = model->loss(x, out, labels);
    const int64_t held = tracking.tracker().current_bytes() - before - int64_t(out.nbytes()) - int64_t(loss.nbytes());
    loss.backward();
    return held;
  };
  const int64_t l0 = measure("L0");
  const int64_t l3 = measure("L3");
  EXPECT_GT(l0, 8 * l3) << "L0 " << l0 << " bytes, L3 " << l3 << " bytes";
}
