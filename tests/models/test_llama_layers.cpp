// RMSNorm / QRMSNorm and Mul / QMul (the layers Llama-style models add)
// against plain autograd and an fp64 reference.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "actkit/converters/convert.h"
#include "actkit/core/errors.h"
#include "actkit/layers/modules.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;

namespace actkit::llama_layers_test {

std::shared_ptr<Controller> make_controller(const std::string& level) {
  return std::make_shared<Controller>(parse_level(level), 7);
}

double relative(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm().clamp_min(1e-30)).item<double>();
}

// The fp64 reference: x * rsqrt(mean(x^2) + eps) * w.
at::Tensor reference_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * (x.pow(2).mean(-1, true) + eps).rsqrt() * w;
}

// The per-value rounding step of an 8-bit save of `x`: a group's range is
// within the tensor's, so (max - min) / 255 at most. Stochastic rounding
// to that grid is unbiased with variance at most step^2 / 4 per value.
double step_of(const at::Tensor& x) { return (x.max() - x.min()).item<double>() / 255.0; }

struct RmsGrads {
  at::Tensor y, gx, gw;
};

// One forward/backward of `fwd` on a fresh leaf copy of x; `weight` is the
// norm's scale, whose gradient is read and reset.
RmsGrads run_rms(const std::function<at::Tensor(const at::Tensor&)>& fwd, const at::Tensor& weight,
                 const at::Tensor& x, const at::Tensor& gy) {
  weight.mutable_grad() = at::Tensor();
  const at::Tensor xin = x.detach().clone().requires_grad_();
  RmsGrads out;
  out.y = fwd(xin);
  out.y.backward(gy);
  out.gx = xin.grad();
  out.gw = weight.grad().clone();
  return out;
}

// A scale that is not all ones and inputs with rows of different ranges.
RMSNorm make_rms(int64_t size) {
  RMSNorm norm(size, 1e-6);
  torch::NoGradGuard no_grad;
  norm->weight.copy_(1 + 0.3 * at::randn({size}));
  return norm;
}


// The plain module is transformers' LlamaRMSNorm for fp32, operation by
// operation (upcast, x * rsqrt(mean(x^2) + eps), cast back, times weight),
// and close to the fp64 formula.
TEST(RMSNorm, ComputesTransformersArithmetic) {
  at::manual_seed(3);
  RMSNorm norm = make_rms(48);
  const at::Tensor x = at::randn({4, 5, 48}) * at::rand({4, 5, 1}) * 3;
  const at::Tensor y = norm->forward(x);
  const at::Tensor hs = x.to(at::kFloat);
  const at::Tensor expect = norm->weight * (hs * at::rsqrt(hs.pow(2).mean(-1, true) + 1e-6)).to(x.scalar_type());
  EXPECT_TRUE(bitwise_equal(y, expect));
  EXPECT_LT(relative(y, reference_rms_norm(x.to(at::kDouble), norm->weight.to(at::kDouble), 1e-6)), 1e-6);
  // bf16 computes in fp32 and casts back before the weight.
  const at::Tensor xb = x.to(at::kBFloat16);
  EXPECT_EQ(norm->forward(xb).scalar_type(), at::kFloat);  // fp32 weight * bf16 -> fp32, as in transformers
  EXPECT_THROW(norm->forward(at::randn({2, 47})), InvalidInput);
  EXPECT_THROW(RMSNorm(0), InvalidInput);
}

// L0 runs the plain module (bitwise), and its gradients are fp64 autograd's
// up to fp32 rounding.
TEST(RMSNorm, LevelZeroGradientsAreTheFp64Gradients) {
  at::manual_seed(4);
  RMSNorm norm = make_rms(40);
  QRMSNorm q(norm.ptr(), make_controller("L0"), "norm", LayerKind::kNorm);
  const at::Tensor x = at::randn({6, 7, 40}) * 2;
  const at::Tensor gy = at::randn({6, 7, 40});
  const RmsGrads plain = run_rms([&](const at::Tensor& t) { return norm->forward(t); }, norm->weight, x, gy);
  const RmsGrads level0 = run_rms([&](const at::Tensor& t) { return q->forward(t); }, norm->weight, x, gy);
  EXPECT_TRUE(bitwise_equal(plain.y, level0.y));
  EXPECT_TRUE(bitwise_equal(plain.gx, level0.gx));
  EXPECT_TRUE(bitwise_equal(plain.gw, level0.gw));
  const at::Tensor xd = x.to(at::kDouble).requires_grad_();
  const at::Tensor wd = norm->weight.detach().to(at::kDouble).requires_grad_();
  reference_rms_norm(xd, wd, 1e-6).backward(gy.to(at::kDouble));
  EXPECT_LT(relative(level0.gx, xd.grad()), 1e-6);
  EXPECT_LT(relative(level0.gw, wd.grad()), 1e-6);
}

// Compressed, forward is still the plain module's, bitwise. Backward reads
// x + e, e the rounding error (E e = 0, Var e <= step^2 / 4 per value):
//   weight:  dw_k = sum over rows of g_k x_k r,  so  Var(err_k) <= step^2/4 sum_rows g_k^2 r^2;
//   input:   with n = x r, gn = g w and m = mean(gn n) per row, to first order
//            err_j = -r^2 (e_j m + n_j mean(gn e)), so E err_j^2 <= r^4 step^2/2 (m^2 + n_j^2 sum(gn^2)/H^2).
// Each error is a sum of many independent terms, near Gaussian: 6 times its
// root mean square is out of reach by chance, while a wrong backward is off
// by the order of the gradient itself (tens of times the bound).
TEST(RMSNorm, CompressedGradientsAreWithinTheQuantizersBound) {
  at::manual_seed(5);
  const int64_t h = 64;
  RMSNorm norm = make_rms(h);
  const at::Tensor x = at::randn({8, 9, h}) * at::rand({8, 9, 1}) * 2 + 0.5;
  const at::Tensor gy = at::randn({8, 9, h});
  const RmsGrads exact = run_rms([&](const at::Tensor& t) { return norm->forward(t); }, norm->weight, x, gy);
  const double step = step_of(x);
  const at::Tensor xd = x.to(at::kDouble), gd = gy.to(at::kDouble), wd = norm->weight.detach().to(at::kDouble);
  const at::Tensor r = (xd.pow(2).mean(-1, true) + 1e-6).rsqrt();
  const at::Tensor n = xd * r, gn = gd * wd;
  const at::Tensor m = (gn * n).mean(-1, true);
  const double w_bound = 6 * std::sqrt((gd.pow(2) * r.pow(2)).sum().item<double>() * step * step / 4);
  const double x_bound = 6 * std::sqrt((r.pow(4) * (m.pow(2) + n.pow(2) * gn.pow(2).sum(-1, true) / double(h * h)))
                                           .sum()
                                           .item<double>() *
                                       step * step / 2);
  for (const char* level : {"L2:bits=8", "L2:bits=8,chunk_bytes=1"}) {
    auto ctrl = make_controller(level);
    QRMSNorm q(norm.ptr(), ctrl, "norm", LayerKind::kNorm);
    const RmsGrads got = run_rms([&](const at::Tensor& t) { return q->forward(t); }, norm->weight, x, gy);
    EXPECT_TRUE(bitwise_equal(got.y, exact.y)) << level;
    EXPECT_GT(ctrl->stats().compress_calls, 0) << level;
    EXPECT_LT((got.gw - exact.gw).norm().item<double>(), w_bound) << level;
    EXPECT_LT((got.gx - exact.gx).norm().item<double>(), x_bound) << level;
    // The bounds are far below the gradients: a wrong formula fails them.
    EXPECT_LT(w_bound, 0.2 * exact.gw.norm().item<double>());
    EXPECT_LT(x_bound, 0.2 * exact.gx.norm().item<double>());
  }
}

TEST(RMSNorm, EvalModeAndNoGradRunThePlainModule) {
  RMSNorm norm = make_rms(16);
  auto ctrl = make_controller("L3");
  QRMSNorm q(norm.ptr(), ctrl, "norm", LayerKind::kNorm);
  const at::Tensor x = at::randn({3, 16}).requires_grad_();
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(bitwise_equal(q->forward(x), norm->forward(x)));
  }
  q->eval();
  EXPECT_TRUE(bitwise_equal(q->forward(x), norm->forward(x)));
  EXPECT_EQ(ctrl->stats().input_bytes, 0);
  EXPECT_EQ(q->named_parameters()["weight"].data_ptr(), norm->weight.data_ptr());
}

TEST(Mul, LevelZeroIsThePlainProductAndItsGradients) {
  at::manual_seed(6);
  QMul q(make_controller("L0"), "gate");
  const at::Tensor a = at::randn({4, 5, 24}).requires_grad_(), b = at::randn({4, 5, 24}).requires_grad_();
  const at::Tensor gy = at::randn({4, 5, 24});
  const at::Tensor y = q->forward(a, b);
  EXPECT_TRUE(bitwise_equal(y, a * b));
  y.backward(gy);
  EXPECT_TRUE(bitwise_equal(a.grad(), gy * b));
  EXPECT_TRUE(bitwise_equal(b.grad(), gy * a));
}

// da = g * b reads b + e_b: err = g * e_b, Var <= g^2 step_b^2 / 4 per
// value, independent between values; likewise db. Both operands one
// tensor: one payload, and the gradient g * a + g * a reads it twice.
TEST(Mul, CompressedGradientsAreWithinTheQuantizersBound) {
  at::manual_seed(7);
  const at::Tensor a0 = at::silu(at::randn({6, 11, 40}) * 2), b0 = at::randn({6, 11, 40}) * 3;
  const at::Tensor gy = at::randn({6, 11, 40});
  const auto bound = [&](const at::Tensor& other, double scale) {
    return 6 * scale * std::sqrt(gy.to(at::kDouble).pow(2).sum().item<double>() * std::pow(step_of(other), 2) / 4);
  };
  for (const char* level : {"L2:bits=8", "L2:bits=8,chunk_bytes=1"}) {
    auto ctrl = make_controller(level);
    QMul q(ctrl, "gate");
    const at::Tensor a = a0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    const at::Tensor y = q->forward(a, b);
    EXPECT_TRUE(bitwise_equal(y, a0 * b0)) << level;
    y.backward(gy);
    EXPECT_LT((a.grad() - gy * b0).norm().item<double>(), bound(b0, 1)) << level;
    EXPECT_LT((b.grad() - gy * a0).norm().item<double>(), bound(a0, 1)) << level;
    EXPECT_LT(bound(b0, 1), 0.2 * (gy * b0).norm().item<double>());
    EXPECT_EQ(ctrl->stats().compress_calls, 2) << level;

    const at::Tensor s = b0.clone().requires_grad_();
    q->forward(s, s).backward(gy);
    EXPECT_EQ(ctrl->stats().shared_hits, 1) << level;
    EXPECT_LT((s.grad() - 2 * gy * b0).norm().item<double>(), bound(b0, 2)) << level;
  }
}

TEST(Mul, RefusesOperandsOfDifferentShapesWhenCompressing) {
  QMul q(make_controller("L3"), "gate");
  EXPECT_THROW(q->forward(at::randn({2, 3}).requires_grad_(), at::randn({3})), InvalidInput);
  QMul plain(make_controller("L0"), "gate");  // the plain product broadcasts, as a * b does
  EXPECT_EQ(plain->forward(at::randn({2, 3}).requires_grad_(), at::randn({3})).sizes(), at::IntArrayRef({2, 3}));
}

// convert() swaps both wherever LayerNorm and MatMul are swapped, under the
// norm and activation switches.
TEST(Mul, ConvertSwapsRMSNormAndMulUnderTheirSwitches) {
  torch::nn::ModuleList list(RMSNorm(8), Mul());
  const ConvertResult l1 = convert(*list, "L1");
  ASSERT_EQ(l1.report.converted.size(), 2u);
  EXPECT_EQ(l1.report.converted[0].to, "actkit::QRMSNormImpl");
  EXPECT_EQ(l1.report.converted[1].to, "actkit::QMulImpl");
  EXPECT_NE(l1.report.converted[0].reason.find("norm layers off"), std::string::npos);
  EXPECT_NE(l1.report.converted[1].reason.find("activation layers off"), std::string::npos);
  EXPECT_NE(list[0]->name().find("QRMSNorm"), std::string::npos);
  EXPECT_NE(list[1]->name().find("QMul"), std::string::npos);

  torch::nn::ModuleList fresh(RMSNorm(8), Mul());
  const ConvertResult l3 = convert(*fresh, "L3");
  const at::Tensor x = at::randn({4, 8}).requires_grad_();
  const at::Tensor h = fresh[0]->as<QRMSNormImpl>()->forward(x);
  fresh[1]->as<QMulImpl>()->forward(h, x).sum().backward();
  EXPECT_EQ(l3.controller->stats().compress_calls, 2);  // the norm's input x (Mul's b shares it), h
  EXPECT_EQ(l3.controller->stats().shared_hits, 1);
}

}  // namespace actkit::llama_layers_test
