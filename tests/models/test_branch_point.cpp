// branch_point(): one node sums a shared input's gradients, in place where
// nothing else holds them, with the same values as autograd's own sum.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/core/errors.h"
#include "actkit/layers/branch_point.h"
#include "actkit/layers/modules.h"
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

// Where the branch's gradient meets the shortcut's, branch_point sums in
// place: backward holds two gradients at once, never more than autograd's
// own sum. (LibTorch 1.13's autograd sums out of place and holds three;
// LibTorch 2.x's accumulates in place too, so there the two are equal.)
// The branch here needs no workspace of its own, so the sum is the peak.
TEST(BranchPoint, SumsInPlaceSoBackwardHoldsTwoGradients) {
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
  const int64_t gradient = kElements * 4;
  EXPECT_LE(peak[1], 2 * gradient + 4096) << "branch_point: " << peak[1];
  EXPECT_LE(peak[1], peak[0] + 4096) << "autograd's sum: " << peak[0] << ", branch_point: " << peak[1];
  EXPECT_GE(peak[0], 2 * gradient) << "autograd's sum holds both gradients it adds";
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

// A residual block of compressed convolutions, x -> conv_a(x)/2 + shortcut(x),
// the shortcut being x itself or conv_b(x). `sink`: through branch_point()
// and residual_add(), so the convolutions add their input gradients into the
// one waiting at the branch point; otherwise shared the plain way.
struct ResidualBlock {
  std::shared_ptr<torch::nn::Conv2dImpl> a, b;
  QConv2d qa, qb;
  ResidualBlock(int64_t channels, const std::string& level)
      : a(std::make_shared<torch::nn::Conv2dImpl>(torch::nn::Conv2dOptions(channels, channels, 3).padding(1))),
        b(std::make_shared<torch::nn::Conv2dImpl>(torch::nn::Conv2dOptions(channels, channels, 1))),
        qa(a, std::make_shared<Controller>(parse_level(level), 7), "a", LayerKind::kConv),
        qb(b, std::make_shared<Controller>(parse_level(level), 8), "b", LayerKind::kConv) {}

  at::Tensor forward(const at::Tensor& input, bool sink, bool conv_shortcut) {
    const at::Tensor x = input.mul(1.0);  // a node of its own, as a previous block's output
    const std::vector<at::Tensor> u = sink ? branch_point(x) : std::vector<at::Tensor>{x, x};
    // A second step in the branch, as a real block has: the branch's first
    // convolution then receives a gradient other than the shortcut's.
    at::Tensor out = qa->forward(u[0]).mul(0.5);
    const at::Tensor shortcut = conv_shortcut ? qb->forward(u[1]) : u[1];
    if (sink) return residual_add(out, shortcut);
    out += shortcut;
    return out;
  }
};

struct BlockGrads {
  at::Tensor input, weight_a, weight_b;
};

BlockGrads block_grads(bool sink, bool conv_shortcut, const std::string& level) {
  at::manual_seed(11);
  ResidualBlock block(8, level);
  const at::Tensor input = at::randn({6, 8, 10, 10}).requires_grad_();
  const at::Tensor gy = at::randn({6, 8, 10, 10});
  block.forward(input, sink, conv_shortcut).backward(gy);
  return {input.grad(), block.a->weight.grad(), conv_shortcut ? block.b->weight.grad() : at::Tensor()};
}

// The input gradient is g + conv_a's input gradient either way, one addition
// per element: the same bits whether autograd adds the two tensors or each
// piece of conv_a's gradient is added into g.
TEST(BranchPoint, ResidualBlocksGiveAutogradsGradientsInPiecesAndWhole) {
  for (const char* level : {"L3:chunk_bytes=1", "L3:chunk_bytes=0", "L0"}) {
    for (bool conv_shortcut : {false, true}) {
      const BlockGrads plain = block_grads(false, conv_shortcut, level);
      const BlockGrads sunk = block_grads(true, conv_shortcut, level);
      const std::string what = std::string(level) + (conv_shortcut ? ", convolution shortcut" : ", identity");
      EXPECT_TRUE(bitwise_equal(plain.input, sunk.input)) << what;
      EXPECT_TRUE(bitwise_equal(plain.weight_a, sunk.weight_a)) << what;
      if (conv_shortcut) EXPECT_TRUE(bitwise_equal(plain.weight_b, sunk.weight_b)) << what;
    }
  }
}

// With the gradient waiting in the sink, the branch's convolution adds its
// pieces into it: backward never holds a second input-sized gradient.
TEST(BranchPoint, ConvolutionsAddTheirPiecesIntoTheWaitingGradient) {
  at::manual_seed(12);
  ResidualBlock block(16, "L3:chunk_bytes=256K");
  const at::Tensor input = at::randn({16, 16, 32, 32}).requires_grad_();  // 1 MiB of gradient
  const at::Tensor gy = at::randn({16, 16, 32, 32});
  const int64_t input_bytes = input.numel() * 4;
  ScopedCpuTracking tracking;
  TrackingAllocator& t = tracking.tracker();
  int64_t extra[2];
  for (bool sink : {false, true}) {
    // The block's output gradient is formed inside backward (as a next
    // layer's would be), so nothing outside holds it.
    const at::Tensor loss = (block.forward(input, sink, false) * gy).sum();
    input.mutable_grad() = at::Tensor();
    t.reset_peak();
    const int64_t before = t.current_bytes();
    loss.backward();
    extra[sink] = t.peak_bytes() - before;
  }
  EXPECT_LE(extra[1], extra[0] - input_bytes) << "plain " << extra[0] << ", branch point " << extra[1];
}

TEST(BranchPoint, ResidualAddIsAPlainAddWithoutGradientsAndChecksShapes) {
  at::Tensor out = at::ones({2, 3});
  EXPECT_TRUE(at::equal(residual_add(out, at::ones({2, 3})), at::full({2, 3}, 2.0)));
  EXPECT_TRUE(at::equal(out, at::full({2, 3}, 2.0)));  // in place
  EXPECT_THROW(residual_add(out, at::ones({3, 2})), InvalidInput);
  at::Tensor undefined;
  EXPECT_THROW(residual_add(undefined, out), InvalidInput);
}

TEST(BranchPoint, ResidualAddSupportsDoubleBackward) {
  const at::Tensor a = at::randn({5}).requires_grad_();
  const at::Tensor b = a.detach().clone().requires_grad_();
  const auto u = branch_point(b * 1.0);
  at::Tensor sb = u[0].sin();
  const at::Tensor yb = residual_add(sb, u[1]);
  const at::Tensor ya = (a * 1.0).sin() + a * 1.0;
  const at::Tensor ga = torch::autograd::grad({ya.pow(2).sum()}, {a}, {}, true, true)[0];
  const at::Tensor gb = torch::autograd::grad({yb.pow(2).sum()}, {b}, {}, true, true)[0];
  EXPECT_TRUE(at::allclose(ga, gb));
  EXPECT_TRUE(at::allclose(torch::autograd::grad({ga.sum()}, {a})[0], torch::autograd::grad({gb.sum()}, {b})[0]));
}

TEST(BranchPoint, BadArgumentsAreClearErrors) {
  EXPECT_THROW(branch_point(at::Tensor()), InvalidInput);
  EXPECT_THROW(branch_point(at::ones({2}), 0), InvalidInput);
}

}  // namespace
