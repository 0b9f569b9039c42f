// Every compressed layer against the plain LibTorch layer it wraps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/core/errors.h"
#include "actkit/layers/branch_point.h"
#include "actkit/layers/modules.h"
#include "layer_cases.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;

namespace {

struct Pass {
  at::Tensor y;
  std::vector<at::Tensor> grads;  // input first, then parameters in order
};

using Forward = std::function<at::Tensor(const at::Tensor&)>;

// One forward/backward of `fwd` on a fresh leaf copy of x.
Pass run(torch::nn::Module& params_of, const Forward& fwd, const at::Tensor& x, const at::Tensor& gy,
         uint64_t seed = 1) {
  for (auto& p : params_of.parameters()) p.mutable_grad() = at::Tensor();
  at::manual_seed(int64_t(seed));
  at::Tensor xin = x.detach().clone().requires_grad_(x.is_floating_point());
  Pass out;
  out.y = fwd(xin);
  out.y.backward(gy);
  out.grads.push_back(xin.grad().defined() ? xin.grad().clone() : at::Tensor());
  for (auto& p : params_of.parameters()) out.grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return out;
}

double rel_error(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).norm() / b.norm().clamp_min(1e-30)).item<double>();
}

std::shared_ptr<Controller> controller(const std::string& level, uint64_t seed = 7) {
  return std::make_shared<Controller>(parse_level(level), seed);
}

using test::LayerCase;

std::vector<LayerCase> layer_cases() { return test::all_layer_cases(); }

class LayerTest : public ::testing::TestWithParam<size_t> {
 protected:
  // Same inputs whatever ran before in this process (ctest runs each test
  // alone, a plain run shares one generator).
  void SetUp() override { at::manual_seed(1234); }
  LayerCase c = layer_cases()[GetParam()];
};

std::string layer_case_name(const ::testing::TestParamInfo<size_t>& info) { return layer_cases()[info.param].name; }

}  // namespace

TEST_P(LayerTest, LevelZeroIsBitwiseThePlainLayer) {
  auto plain = c.make_plain();
  auto q = c.wrap(plain, controller("L0"));
  const at::Tensor x = at::randn(c.input_shape);
  const at::Tensor y0 = c.call(*plain, x);
  const at::Tensor gy = at::randn_like(y0);
  const Pass a = run(*plain, [&](const at::Tensor& t) { return c.call(*plain, t); }, x, gy);
  const Pass b = run(*q, [&](const at::Tensor& t) { return c.call(*q, t); }, x, gy);
  EXPECT_TRUE(bitwise_equal(a.y, b.y));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(bitwise_equal(a.grads[i], b.grads[i])) << "grad " << i;
}

// Forward is the plain layer's at every width; lossless layers give exact
// gradients and 8 bits close ones. (What low-bit gradients estimate, the
// fp32 gradient, is tested over many seeds in test_unbiased_gradients.cpp.)
TEST_P(LayerTest, CompressedForwardIsExactAndGradientsClose) {
  auto plain = c.make_plain();
  const at::Tensor x = at::randn(c.input_shape);
  const at::Tensor gy = at::randn_like(c.call(*plain, x));
  const Pass ref = run(*plain, [&](const at::Tensor& t) { return c.call(*plain, t); }, x, gy);
  for (const char* level : {"L2:bits=8", "L2", "L3"}) {
    auto ctrl = controller(level);
    auto q = c.wrap(plain, ctrl);
    const Pass got = run(*q, [&](const at::Tensor& t) { return c.call(*q, t); }, x, gy);
    EXPECT_TRUE(bitwise_equal(got.y, ref.y)) << level;
    EXPECT_GT(ctrl->stats().input_bytes, 0) << level << ": nothing was compressed";
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      if (!ref.grads[i].defined()) continue;
      ASSERT_TRUE(got.grads[i].defined()) << level << " grad " << i;
      if (c.lossless) {
        EXPECT_TRUE(bitwise_equal(got.grads[i], ref.grads[i])) << level << " grad " << i;
      } else if (std::string(level) == "L2:bits=8") {
        EXPECT_LT(rel_error(got.grads[i], ref.grads[i]), 0.05) << level << " grad " << i;
      }
    }
  }
}

TEST_P(LayerTest, EvalModeAndNoGradRunThePlainLayer) {
  auto plain = c.make_plain();
  auto ctrl = controller("L3");
  auto q = c.wrap(plain, ctrl);
  const at::Tensor x = at::randn(c.input_shape);
  {
    torch::NoGradGuard no_grad;
    at::manual_seed(3);  // dropout draws a mask per call
    const at::Tensor from_q = c.call(*q, x);
    at::manual_seed(3);
    EXPECT_TRUE(bitwise_equal(from_q, c.call(*plain, x)));
  }
  q->eval();
  plain->eval();
  const at::Tensor xg = x.clone().requires_grad_();
  EXPECT_TRUE(bitwise_equal(c.call(*q, xg), c.call(*plain, x)));
  EXPECT_EQ(ctrl->stats().input_bytes, 0);
}

// chunk_bytes=1 makes every piece one sample: the piecewise forward and
// backward must compute what the whole-batch calls compute (up to
// summation order), from the same quantized activations.
TEST_P(LayerTest, PiecewiseMatchesTheWholeBatch) {
  auto plain = c.make_plain();
  const at::Tensor x = at::randn(c.input_shape);
  const at::Tensor gy = at::randn_like(c.call(*plain, x));
  auto whole = c.wrap(plain, controller("L2:bits=8,chunk_bytes=0"));
  auto pieces = c.wrap(plain, controller("L2:bits=8,chunk_bytes=1"));
  const Pass a = run(*whole, [&](const at::Tensor& t) { return c.call(*whole, t); }, x, gy);
  const Pass b = run(*pieces, [&](const at::Tensor& t) { return c.call(*pieces, t); }, x, gy);
  EXPECT_LT(rel_error(b.y, a.y), 1e-6);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (!a.grads[i].defined()) continue;
    EXPECT_LT(rel_error(b.grads[i], a.grads[i]), 1e-5) << "grad " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerTest, ::testing::Range<size_t>(0, layer_cases().size()), layer_case_name);

TEST(Layers, ParametersAreSharedWithTheWrappedModule) {
  auto conv = std::make_shared<torch::nn::Conv2dImpl>(torch::nn::Conv2dOptions(3, 4, 3));
  QConv2d q(conv, controller("L3"), "conv", LayerKind::kConv);
  EXPECT_EQ(q->named_parameters()["weight"].data_ptr(), conv->weight.data_ptr());
  EXPECT_EQ(q->named_parameters()["bias"].data_ptr(), conv->bias.data_ptr());
  auto bn = std::make_shared<torch::nn::BatchNorm2dImpl>(4);
  QBatchNorm2d qbn(bn, controller("L3"), "bn", LayerKind::kNorm);
  EXPECT_EQ(qbn->named_buffers()["running_mean"].data_ptr(), bn->running_mean.data_ptr());
}

TEST(Layers, BatchNormUpdatesRunningStatisticsLikeThePlainLayer) {
  auto a = std::make_shared<torch::nn::BatchNorm2dImpl>(3);
  auto b = std::make_shared<torch::nn::BatchNorm2dImpl>(3);
  QBatchNorm2d q(b, controller("L3"), "bn", LayerKind::kNorm);
  for (int i = 0; i < 3; ++i) {
    const at::Tensor x = at::randn({4, 3, 5, 5}).requires_grad_();
    a->forward(x);
    q->forward(x);
  }
  EXPECT_TRUE(bitwise_equal(a->running_mean, b->running_mean));
  EXPECT_TRUE(bitwise_equal(a->running_var, b->running_var));
  EXPECT_TRUE(bitwise_equal(a->num_batches_tracked, b->num_batches_tracked));
}

TEST(Layers, MatMulSavesBothOperandsAndSharesTheSameTensor) {
  auto ctrl = controller("L2:bits=8");
  QMatMul mm(ctrl, "scores");
  const at::Tensor a = at::randn({3, 5, 8}).requires_grad_();
  const at::Tensor b = at::randn({3, 8, 4}).requires_grad_();
  const at::Tensor ref_a = a.detach().clone().requires_grad_();
  const at::Tensor ref_b = b.detach().clone().requires_grad_();
  const at::Tensor gy = at::randn({3, 5, 4});
  mm->forward(a, b).backward(gy);
  at::matmul(ref_a, ref_b).backward(gy);
  EXPECT_LT(rel_error(a.grad(), ref_a.grad()), 0.02);
  EXPECT_LT(rel_error(b.grad(), ref_b.grad()), 0.02);
  const at::Tensor s = at::randn({2, 6, 6}).requires_grad_();
  mm->forward(s, s).sum().backward();
  EXPECT_EQ(ctrl->stats().shared_hits, 1);
  EXPECT_THROW(mm->forward(at::randn({2, 3, 4}).requires_grad_(), at::randn({4, 5})), InvalidInput);
}

// A residual block's branch and downsample convolutions read two
// branch_point() aliases of one input: one payload, and a view of other
// samples of the same memory is not mistaken for it.
TEST(Layers, AliasesOfOneTensorStoreItOnceButOtherViewsDoNot) {
  auto ctrl = controller("L3");
  QLinear q(std::make_shared<torch::nn::LinearImpl>(16, 16), ctrl, "q", LayerKind::kLinear);
  QLinear k(std::make_shared<torch::nn::LinearImpl>(16, 16), ctrl, "k", LayerKind::kLinear);
  const at::Tensor leaf = at::randn({4, 10, 16}).requires_grad_();
  const auto x = branch_point(leaf * 1.0);
  (q->forward(x[0]) + k->forward(x[1])).sum().backward();
  EXPECT_EQ(ctrl->stats().compress_calls, 1);
  EXPECT_EQ(ctrl->stats().shared_hits, 1);
  const at::Tensor y = leaf * 1.0;
  (q->forward(y.narrow(0, 0, 2)) + k->forward(y.narrow(0, 2, 2))).sum().backward();
  EXPECT_EQ(ctrl->stats().compress_calls, 3);
  EXPECT_EQ(ctrl->stats().shared_hits, 1);
}

TEST(Layers, ConsecutiveLayersOnOneTensorStoreItOnce) {
  auto ctrl = controller("L3");
  QLinear q(std::make_shared<torch::nn::LinearImpl>(16, 16), ctrl, "q", LayerKind::kLinear);
  QLinear k(std::make_shared<torch::nn::LinearImpl>(16, 16), ctrl, "k", LayerKind::kLinear);
  const at::Tensor x = at::randn({4, 10, 16}).requires_grad_();
  (q->forward(x) + k->forward(x)).sum().backward();
  EXPECT_EQ(ctrl->stats().compress_calls, 1);
  EXPECT_EQ(ctrl->stats().shared_hits, 1);
  ASSERT_TRUE(x.grad().defined());
}

// ReLU(inplace=true), as the zoo's ResNets use it: overwrites its input like
// the plain layer and gives the same values and gradients.
TEST(Layers, InPlaceReLUOverwritesItsInputAndMatchesThePlainLayer) {
  auto ctrl = controller("L3");
  QReLU q(std::make_shared<torch::nn::ReLUImpl>(torch::nn::ReLUOptions(true)), ctrl, "relu", LayerKind::kActivation);
  const at::Tensor x = at::randn({4, 8, 5, 5}).requires_grad_();
  const at::Tensor gy = at::randn({4, 8, 5, 5});
  at::Tensor h = x * 2;  // an intermediate, as in a network
  const void* storage = h.data_ptr();
  const at::Tensor y = q->forward(h);
  EXPECT_EQ(y.data_ptr(), storage);
  EXPECT_TRUE(bitwise_equal(h, at::relu(x.detach() * 2)));
  y.backward(gy);
  const at::Tensor expect = gy.masked_fill(x.detach() <= 0, 0) * 2;
  EXPECT_TRUE(bitwise_equal(x.grad(), expect));
}

TEST(Layers, UnsupportedOptionsFallBackToThePlainLayer) {
  auto conv = std::make_shared<torch::nn::Conv2dImpl>(
      torch::nn::Conv2dOptions(2, 2, 3).padding(1).padding_mode(torch::kReflect));
  auto ctrl = controller("L3");
  QConv2d q(conv, ctrl, "conv", LayerKind::kConv);
  EXPECT_FALSE(q->supported());
  const at::Tensor x = at::randn({2, 2, 8, 8}).requires_grad_();
  EXPECT_TRUE(bitwise_equal(q->forward(x), conv->forward(x)));
  EXPECT_EQ(ctrl->stats().input_bytes, 0);
}

// forward_inplace (what conv_bn uses) gives the out-of-place values, the
// same gradients and running statistics, and writes over its input.
TEST(Layers, InPlaceBatchNormMatchesOutOfPlace) {
  for (const char* level : {"L2:bits=8", "L2:bits=8,chunk_bytes=1"}) {
    torch::nn::BatchNorm2d bn_a(6), bn_b(6);
    {
      torch::NoGradGuard no_grad;
      bn_a->weight.uniform_(0.5, 1.5);
      bn_a->bias.uniform_(-1, 1);
      bn_b->weight.copy_(bn_a->weight);
      bn_b->bias.copy_(bn_a->bias);
    }
    QBatchNorm2d qa(bn_a.ptr(), controller(level), "a", LayerKind::kNorm);
    QBatchNorm2d qb(bn_b.ptr(), controller(level), "b", LayerKind::kNorm);
    const at::Tensor x = at::randn({8, 6, 9, 9}) * 3 + 1;
    const at::Tensor gy = at::randn({8, 6, 9, 9});
    const at::Tensor xa = x.clone().requires_grad_();
    const at::Tensor xb = x.clone().requires_grad_();
    const at::Tensor ya = qa->forward(xa * 2);
    at::Tensor hb = xb * 2;
    const at::Tensor yb = qb->forward_inplace(hb);
    EXPECT_EQ(yb.data_ptr(), hb.data_ptr()) << level;
    EXPECT_LT(rel_error(yb, ya), 1e-6) << level;
    ya.backward(gy);
    yb.backward(gy);
    EXPECT_LT(rel_error(xb.grad(), xa.grad()), 1e-5) << level;
    EXPECT_LT(rel_error(bn_b->weight.grad(), bn_a->weight.grad()), 1e-5) << level;
    EXPECT_LT(rel_error(bn_b->bias.grad(), bn_a->bias.grad()), 1e-5) << level;
    EXPECT_LT(rel_error(bn_b->running_mean, bn_a->running_mean), 1e-6) << level;
    EXPECT_LT(rel_error(bn_b->running_var, bn_a->running_var), 1e-6) << level;
  }
}

// A layer's compressed payload goes as soon as its backward has run, not
// when the whole graph is destroyed; retain_graph keeps it for a second
// backward, and a third gets autograd's error.
TEST(Layers, SavedPayloadsAreFreedByBackward) {
  auto ctrl = controller("L2:bits=8");
  auto conv = std::make_shared<torch::nn::Conv2dImpl>(torch::nn::Conv2dOptions(16, 16, 3).padding(1).bias(false));
  QConv2d q(conv, ctrl, "conv", LayerKind::kConv);
  const at::Tensor x = at::randn({8, 16, 32, 32}).requires_grad_();
  const at::Tensor gy = at::randn({8, 16, 32, 32});
  x.mutable_grad() = at::zeros_like(x);
  conv->weight.mutable_grad() = at::zeros_like(conv->weight);
  ScopedCpuTracking tracking;
  const at::Tensor y = q->forward(x);
  const int64_t payload = ctrl->stats().compressed_bytes;
  ASSERT_GT(payload, 64 * 1024);
  const int64_t before = tracking.tracker().current_bytes();
  y.backward(gy);  // y, and with it the graph, stay alive
  EXPECT_LE(tracking.tracker().current_bytes(), before - payload + 4096);

  const at::Tensor y2 = q->forward(x);
  const at::Tensor g0 = x.grad().clone();
  y2.backward(gy, /*retain_graph=*/true);
  const at::Tensor g1 = x.grad().clone();
  y2.backward(gy);
  EXPECT_LT(rel_error(x.grad() - g1, g1 - g0), 1e-5);  // the same gradient twice
  EXPECT_THROW(y2.backward(gy), c10::Error);
}

// ActNN App. B.1: a convolution's sensitivity carries K / (I * A), I the
// number of positions of the feature map it saves -- its input, whatever the
// stride, also when transposed.
TEST(Layers, ConvolutionSensitivityCountsInputPositions) {
  // 3x3 kernel, 2 groups, stride 2 over a 16x12 input (output 8x6): K = 9,
  // I = 192, A = 2.
  EXPECT_DOUBLE_EQ(conv_sensitivity_scale({4, 6, 16, 12}, {8, 3, 3, 3}, 2), 9.0 / (192.0 * 2.0));
  // Transposed, stride 2, over an 8x6 input (output 16x12): I = 48.
  EXPECT_DOUBLE_EQ(conv_sensitivity_scale({4, 6, 8, 6}, {6, 4, 3, 3}, 1), 9.0 / 48.0);
  // 1d and 3d; unbatched (C, L) input.
  EXPECT_DOUBLE_EQ(conv_sensitivity_scale({2, 4, 33}, {6, 4, 5}, 1), 5.0 / 33.0);
  EXPECT_DOUBLE_EQ(conv_sensitivity_scale({4, 33}, {6, 4, 5}, 1), 5.0 / 33.0);
  EXPECT_DOUBLE_EQ(conv_sensitivity_scale({1, 3, 6, 7, 5}, {4, 3, 3, 3, 2}, 1), 18.0 / 210.0);
  EXPECT_THROW(conv_sensitivity_scale({4, 6}, {8, 6}, 1), InvalidInput);
  EXPECT_THROW(conv_sensitivity_scale({4, 6, 8, 8}, {8, 6, 3, 3}, 0), InvalidInput);
}

// What the convolutions hand the controller: two convolutions over the same
// input that differ only in stride, with output gradients of equal
// per-sample norm, are equally sensitive, so step() gives them equal
// budgets (weighting I by output positions made the stride-2 one 4x as
// sensitive, a bit more per value; the transposed one 4x less).
TEST(Layers, StrideDoesNotChangeAConvolutionsBudget) {
  namespace nn = torch::nn;
  for (const bool transposed : {false, true}) {
    auto ctrl = controller("L3");
    std::function<at::Tensor(const at::Tensor&)> f1, f2;
    if (transposed) {
      QConvTranspose2d a(std::make_shared<nn::ConvTranspose2dImpl>(nn::ConvTranspose2dOptions(4, 4, 3).padding(1)),
                         ctrl, "stride1", LayerKind::kConv);
      QConvTranspose2d b(std::make_shared<nn::ConvTranspose2dImpl>(
                             nn::ConvTranspose2dOptions(4, 4, 3).stride(2).padding(1).output_padding(1)),
                         ctrl, "stride2", LayerKind::kConv);
      f1 = [a](const at::Tensor& x) mutable { return a->forward(x); };
      f2 = [b](const at::Tensor& x) mutable { return b->forward(x); };
    } else {
      QConv2d a(std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(4, 4, 3).padding(1)), ctrl, "stride1",
                LayerKind::kConv);
      QConv2d b(std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(4, 4, 3).stride(2).padding(1)), ctrl, "stride2",
                LayerKind::kConv);
      f1 = [a](const at::Tensor& x) mutable { return a->forward(x); };
      f2 = [b](const at::Tensor& x) mutable { return b->forward(x); };
    }
    at::manual_seed(0);
    for (int step = 0; step < 3; ++step) {
      const at::Tensor x = at::randn({16, 4, 16, 16}) * at::rand({16, 1, 1, 1});  // samples of different ranges
      const at::Tensor y1 = f1(x.clone().requires_grad_());  // another storage: not shared
      const at::Tensor y2 = f2(x.clone().requires_grad_());
      // Per sample, ||g||^2 = 1 for both outputs.
      const at::Tensor g1 = at::ones_like(y1) / std::sqrt(double(y1.numel() / y1.size(0)));
      const at::Tensor g2 = at::ones_like(y2) / std::sqrt(double(y2.numel() / y2.size(0)));
      ((y1 * g1).sum() + (y2 * g2).sum()).backward();
      ctrl->step();
    }
    EXPECT_NEAR(ctrl->layer_bits(0), ctrl->layer_bits(1), 0.15) << (transposed ? "transposed" : "convolution");
    EXPECT_NEAR((ctrl->layer_bits(0) + ctrl->layer_bits(1)) / 2, 2.0, 0.07);
  }
}

// The bias gradient of batch norm does not depend on its weight: with the
// weight absent (or present without a bias) each parameter that is there
// gets at::batch_norm's gradient.
//
// The weight gradient sum_i gy_i * (x_i - mean_c) * invstd_c sees the saved
// x through an 8-bit stochastic rounding: x_i + e_i with E e_i = 0 and
// Var e_i <= delta^2 / 4, delta = (max x - min x) / 255 at most (a group's
// range is within the tensor's). So E ||err||^2 <= sum_c invstd_c^2 *
// sum_{i in c} gy_i^2 * delta^2 / 4, and the error, a sum of ~150
// independent terms per channel, is near Gaussian: 6 times its root mean
// square is out of reach by chance, while a wrong x-hat is off by ||grad||
// (~40 times the bound). A ratio to ||grad|| instead would fail whenever
// gy and x-hat happen to be nearly orthogonal, which they are by chance.
double batch_norm_weight_grad_bound(const at::Tensor& x, const at::Tensor& gy, double eps) {
  const at::Tensor var = x.var({0, 2, 3}, /*unbiased=*/false);
  const at::Tensor invstd = (var + eps).rsqrt();
  const double delta = (x.max() - x.min()).item<double>() / 255.0;
  const at::Tensor gy2 = gy.pow(2).sum({0, 2, 3});
  const double mean_square = (invstd.pow(2) * gy2).sum().item<double>() * delta * delta / 4.0;
  return 6.0 * std::sqrt(mean_square);
}

TEST(Layers, BatchNormBiasGradientDoesNotNeedAWeight) {
  at::manual_seed(11);
  for (const char* level : {"L2:bits=8", "L2:bits=8,chunk_bytes=1"}) {
    for (const bool with_weight : {false, true}) {
      auto ctrl = controller(level);
      const LayerHandle layer(ctrl, "bn", LayerKind::kNorm);
      const at::Tensor x = at::randn({6, 4, 5, 5});
      const at::Tensor gy = at::randn({6, 4, 5, 5});
      const at::Tensor p0 = at::randn({4});
      // Reference and compressed, each with its own leaves.
      const at::Tensor xr = x.clone().requires_grad_(), xq = x.clone().requires_grad_();
      const at::Tensor pr = p0.clone().requires_grad_(), pq = p0.clone().requires_grad_();
      const auto weight = [&](const at::Tensor& p) { return with_weight ? c10::optional<at::Tensor>(p) : c10::nullopt; };
      const auto bias = [&](const at::Tensor& p) { return with_weight ? c10::nullopt : c10::optional<at::Tensor>(p); };
      at::batch_norm(xr, weight(pr), bias(pr), {}, {}, true, 0.1, 1e-5, false).backward(gy);
      qbatch_norm(xq, weight(pq), bias(pq), c10::nullopt, c10::nullopt, 0.1, 1e-5, layer).backward(gy);
      const std::string what = std::string(level) + (with_weight ? " weight only" : " bias only");
      ASSERT_TRUE(pq.grad().defined()) << what;
      if (with_weight) {
        EXPECT_LT((pq.grad() - pr.grad()).norm().item<double>(), batch_norm_weight_grad_bound(x, gy, 1e-5)) << what;
      } else {
        EXPECT_LT(rel_error(pq.grad(), pr.grad()), 1e-6) << what;  // sum of gy: exact
      }
      EXPECT_LT(rel_error(xq.grad(), xr.grad()), 0.05) << what;
    }
  }
}
