// branch_point(): one node sums a shared input's gradients, in place where
// nothing else holds them, with the same values as autograd's own sum.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/core/errors.h"
#include "actkit/layers/branch_point.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;

namespace {

constexpr int64_t kElements = int64_t(1) << 20;  // 4 MiB of float

// A residual block in miniature: x = 1.5 * leaf feeds a branch and the
// identity shortcut, out = branch(x) + x. With `split` the two uses get
// branch_point() aliases.
at::Tensor residual_loss(const at::Tensor& leaf, const at::Tensor& w, bool split,
                         const std::function<at::Tensor(const at::Tensor&)>& branch) {
  const at::Tensor x = leaf.mul(1.5);
  const std::vector<at::Tensor> uses = split ? branch_point(x) : std::vector<at::Tensor>{x, x};
  return ((branch(uses[0]) + uses[1]) * w).sum();
}

at::Tensor sine(const at::Tensor& x) { return x.sin(); }

TEST(BranchPoint, GradientsEqualAutogradsOwnSumBitForBit) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({kElements});
  const at::Tensor a = at::randn({kElements}).requires_grad_();
  const at::Tensor b = a.detach().clone().requires_grad_();
  residual_loss(a, w, false, sine).backward();
  residual_loss(b, w, true, sine).backward();
  EXPECT_TRUE(bitwise_equal(a.grad(), b.grad()));  // two terms: a + b == b + a exactly
}

TEST(BranchPoint, ThreeConsumersSumToTheSameGradient) {
  const at::Tensor a = at::randn({1000}).requires_grad_();
  const at::Tensor b = a.detach().clone().requires_grad_();
  const at::Tensor xa = a * 2, xb = b * 2;
  const auto u = branch_point(xb, 3);
  (xa.sin() + xa.cos() * xa).sum().backward();
  (u[0].sin() + u[1].cos() * u[2]).sum().backward();
  EXPECT_TRUE(at::allclose(a.grad(), b.grad(), 1e-6, 1e-6));
}

// Autograd's out-of-place sum holds three gradients at once where the
// branch's gradient meets the shortcut's; branch_point two. The branch
// here needs no workspace of its own, so the sum is the peak.
TEST(BranchPoint, SumsInPlaceSoBackwardHoldsOneGradientLess) {
  at::manual_seed(4);
  const at::Tensor w = at::randn({kElements});
  const at::Tensor w2 = at::randn({kElements});
  const auto scale = [&w2](const at::Tensor& x) { return x * w2; };
  ScopedCpuTracking tracking;
  TrackingAllocator& t = tracking.tracker();
  int64_t peak[2];
  for (bool split : {false, true}) {
    const at::Tensor leaf = at::randn({kElements}).requires_grad_();
    const at::Tensor loss = residual_loss(leaf, w, split, scale);
    t.reset_peak();
    const int64_t before = t.current_bytes();
    loss.backward();
    peak[split] = t.peak_bytes() - before;
  }
  EXPECT_LE(peak[1], peak[0] - kElements * 4 + 4096) << "autograd's sum: " << peak[0] << ", branch_point: " << peak[1];
}

TEST(BranchPoint, DoubleBackwardStillWorks) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({64});
  const at::Tensor a = at::randn({64}).requires_grad_();
  const at::Tensor b = a.detach().clone().requires_grad_();
  at::Tensor ga = torch::autograd::grad({residual_loss(a, w, false, sine)}, {a}, {}, true, true)[0];
  at::Tensor gb = torch::autograd::grad({residual_loss(b, w, true, sine)}, {b}, {}, true, true)[0];
  EXPECT_TRUE(bitwise_equal(ga, gb));
  const at::Tensor gga = torch::autograd::grad({ga.sum()}, {a})[0];
  const at::Tensor ggb = torch::autograd::grad({gb.sum()}, {b})[0];
  EXPECT_TRUE(bitwise_equal(gga, ggb));
}

TEST(BranchPoint, AliasesShareStorageAndPassThroughWithoutGradients) {
  const at::Tensor leaf = at::randn({4, 5}).requires_grad_();
  const at::Tensor x = leaf * 2;
  const auto uses = branch_point(x);
  ASSERT_EQ(uses.size(), 2u);
  for (const auto& u : uses) {
    EXPECT_EQ(u.data_ptr(), x.data_ptr());
    EXPECT_EQ(u.grad_fn()->name(), "BranchPointBackward");
  }
  const at::Tensor plain = at::randn({3});
  for (const auto& u : branch_point(plain, 3)) EXPECT_TRUE(u.is_same(plain));
  at::NoGradGuard no_grad;
  for (const auto& u : branch_point(x, 2)) EXPECT_TRUE(u.is_same(x));
}

TEST(BranchPoint, AnUnusedAliasContributesNothing) {
  const at::Tensor a = at::randn({8}).requires_grad_();
  const auto uses = branch_point(a * 1.0, 2);
  (uses[0] * 3).sum().backward();
  EXPECT_TRUE(at::allclose(a.grad(), at::full({8}, 3.0)));
}

TEST(BranchPoint, BadArgumentsAreClearErrors) {
  EXPECT_THROW(branch_point(at::Tensor()), InvalidInput);
  EXPECT_THROW(branch_point(at::ones({2}), 0), InvalidInput);
}

}  // namespace
