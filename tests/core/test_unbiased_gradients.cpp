// Every lossy compressed layer's gradients as estimators of the fp32
// gradients, at 4 bits (L2) and at 2 bits average with per-sample widths
// (L3): over many seeds, the mean of the compressed layer's gradients must
// approach the plain layer's within a few standard errors, the standard
// error bounded from the quantizer's variance (and, where backward is not
// linear in the saved tensor, within a bias bound of second order in it).
//
// The quantizer: stochastic rounding of a value onto B = 2^b - 1 levels
// a step D = R/B apart, R the group's stored range, is unbiased and adds
// variance p(1-p) D^2 <= R^2/(4 B^2) (ActNN Sec. 4.1; R^2/(6 B^2) on average
// for uniformly spread values). Each bound below propagates that
// per-element bound v through the layer's backward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>

#include "actkit/core/controller.h"
#include "actkit/layers/modules.h"
#include "layer_cases.h"

using namespace actkit;

namespace {

// Draws per test: the standard error falls as 1/sqrt(kSeeds); 300 keeps
// each test near a second on this machine.
constexpr int kSeeds = 300;

// An offload that keeps every payload in memory and remembers what the
// per-group codec stored (the bits each sample got), for the bounds.
class RecordingOffload : public ActivationOffload {
 public:
  std::shared_ptr<SwappedPayload> stash(const CompressedTensor& ct) override {
    if (ct.kind() == CodecKind::kPerGroup) metas.push_back(ct.meta());
    return std::make_shared<Held>(ct);
  }
  std::vector<CompressedMeta> metas;

 private:
  struct Held : SwappedPayload {
    explicit Held(CompressedTensor c) : ct(std::move(c)) {}
    CompressedTensor load() override { return ct; }
    int64_t byte_size() const override { return ct.byte_size(); }
    CompressedTensor ct;
  };
};

// The levels under test, swapping into a RecordingOffload (swapping moves
// payloads, never changes them).
const std::vector<std::string>& levels() {
  static const std::vector<std::string> l{"L2:swap=host", "L3:swap=host"};
  return l;
}

// Per-element bound on the rounding variance of `x` stored as `meta` says:
// R^2/(4 B^2) with B from the sample's bits and R the stored range, which
// the codec rounds outwards to bfloat16 (8 significant bits): the minimum
// down, the range up, so R <= (max - min + |min| 2^-7)(1 + 2^-7).
at::Tensor rounding_variance(const at::Tensor& x, const CompressedMeta& meta) {
  const int64_t n = meta.num_samples(), d = meta.sample_size(), g = meta.group_size;
  const at::Tensor xs = x.detach().to(at::kDouble).reshape({n, d});
  std::vector<double> top_code(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int b = meta.bits != 0 ? meta.bits : int(meta.sample_bits[size_t(i)]);
    top_code[size_t(i)] = double((1 << b) - 1);
  }
  const at::Tensor top = at::tensor(top_code, at::kDouble).unsqueeze(1);
  at::Tensor v = at::empty_like(xs);
  for (int64_t begin = 0; begin < d; begin += g) {
    const at::Tensor group = xs.narrow(1, begin, std::min(g, d - begin));
    const at::Tensor mn = group.amin(1, true), mx = group.amax(1, true);
    const at::Tensor range = (mx - mn + mn.abs() / 128.0) * (1.0 + 1.0 / 128.0) * (1.0 + 1e-6);
    v.narrow(1, begin, group.size(1)).copy_((range / top).pow(2).div(4.0).expand_as(group));
  }
  return v.reshape(x.sizes());
}

// What a gradient is compared with: a bound on each element's variance
// (undefined: the gradient does not depend on the saved tensor) and on its
// bias (undefined: unbiased).
struct Bound {
  at::Tensor var, bias;
};

// Checks that `mean`, the average of kSeeds draws, estimates `ref` within
// `b`: per element the excess |mean - ref| - bias is at most 6 standard
// errors sqrt(var / kSeeds), and the squared excesses in standard errors
// average at most 1 + 4 sqrt(2/N) over the N elements (at most a
// chi-square's mean per degree of freedom, plus four of its standard
// deviations). Float rounding gets 1e-5 of the gradient's largest entry.
void expect_estimates(const at::Tensor& mean, const at::Tensor& ref, const Bound& b, const std::string& what) {
  const at::Tensor r = ref.to(at::kDouble);
  const double rounding = 1e-5 * r.abs().max().item<double>() + 1e-12;
  at::Tensor error = (mean - r).abs();
  if (b.bias.defined()) error = (error - b.bias).clamp_min(0);
  const at::Tensor se = b.var.defined() ? (b.var / kSeeds).sqrt() : at::zeros_like(r);
  const at::Tensor z = error / (se + rounding);
  const double n = double(z.numel());
  EXPECT_LE(z.max().item<double>(), 6.0) << what << ": worst element off by that many standard errors";
  EXPECT_LE(z.pow(2).mean().item<double>(), 1.0 + 4.0 * std::sqrt(2.0 / n)) << what << ": mean squared excess";
}

// Inputs of a bound: the layer's input and output gradient, the tensor it
// saved and that tensor's rounding variance bound.
struct Saved {
  at::Tensor x, gy, value, v;
  torch::nn::Module& plain;
};
using BoundFn = std::function<std::vector<Bound>(const Saved&)>;

// Convolutions and linear layers: the input gradient never reads the saved
// input, and the weight gradient is a sum of g * x products, each pair
// once, so its variance is that sum over g^2 * v: the plain layer's own
// weight gradient for input v and output gradient g^2. The bias gradient
// is exact.
std::vector<Bound> weight_sum_bounds(const Saved& s,
                                     const std::function<at::Tensor(torch::nn::Module&, const at::Tensor&)>& call) {
  const std::shared_ptr<torch::nn::Module> copy = s.plain.clone();
  call(*copy, s.v.to(at::kFloat)).backward(s.gy.pow(2));
  std::vector<Bound> out(1);  // the input gradient: exact
  for (const auto& p : copy->named_parameters()) {
    out.push_back(p.key() == "weight" ? Bound{p.value().grad().to(at::kDouble), {}} : Bound{});
  }
  return out;
}

// The input gradient of batch and layer norm over groups of M values (a
// channel, a row), with u = x^ - m (x^ the decoded input, m the exact
// mean, E u = mu = x - m, Var u <= v):
//   gx_n = a (h_n - mean(h)) - a inv^2 u_n T,   T = (1/M) sum_n' u_n' h_n'
// (batch norm: h = g, a = w * invstd, inv = invstd; layer norm: h = g * w,
// a = inv = rstd). T holds u_n itself, so E[u_n T] = mu_n E[T] + h_n Var(u_n)/M:
// bias <= |a| inv^2 v_n |h_n| / M. Writing u_n T = (h_n/M) u_n^2 + u_n T'
// with T' independent of u_n,
//   Var(u_n T) <= 2 (h_n/M)^2 Var(u_n^2) + 2 [(mu_n^2 + v_n) Var T' + v_n (E T')^2],
// Var(u_n^2) <= 8 mu_n^2 v_n + 8 v_n^2 (rounding moves a value at most a
// step D, D^2 = 4v), Var T' <= sum h^2 v / M^2, E T' = sum mu h / M - mu_n h_n / M.
Bound normalization_input_bound(const at::Tensor& mu, const at::Tensor& v, const at::Tensor& h, const at::Tensor& a,
                                const at::Tensor& inv, at::IntArrayRef dims, double m) {
  const at::Tensor t0 = (mu * h).sum(dims, true) / m;
  const at::Tensor var_t = (h.pow(2) * v).sum(dims, true) / (m * m);
  const at::Tensor e_t = t0 - mu * h / m;
  const at::Tensor var_ut = 2 * (h / m).pow(2) * (8 * mu.pow(2) * v + 8 * v.pow(2)) +
                            2 * ((mu.pow(2) + v) * var_t + v * e_t.pow(2));
  return {a.pow(2) * inv.pow(4) * var_ut, a.abs() * inv.pow(2) * v * h.abs() / m};
}

std::vector<Bound> batch_norm_bounds(const Saved& s) {
  const at::Tensor x = s.x.to(at::kDouble), g = s.gy.to(at::kDouble);
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const double m = double(x.numel() / x.size(1));
  const at::Tensor mean = x.mean(dims, true);
  const at::Tensor invstd = ((x - mean).pow(2).mean(dims, true) + 1e-5).rsqrt();
  at::Tensor w = s.plain.named_parameters()["weight"].detach().to(at::kDouble);
  std::vector<int64_t> channel(size_t(x.dim()), 1);
  channel[1] = x.size(1);
  w = w.reshape(channel);
  // gw_c = sum g (x^ - m) invstd: linear in x^, unbiased.
  const Bound weight{(invstd.pow(2) * g.pow(2) * s.v).sum(dims), {}};
  return {normalization_input_bound(x - mean, s.v, g, w * invstd, invstd, dims, m), weight, Bound{}};
}

std::vector<Bound> layer_norm_bounds(const Saved& s) {
  const at::Tensor x = s.x.to(at::kDouble), g = s.gy.to(at::kDouble);
  const std::vector<int64_t> dims{-1};  // the tests normalize the last dim
  const double m = double(x.size(-1));
  const at::Tensor mean = x.mean(dims, true);
  const at::Tensor rstd = ((x - mean).pow(2).mean(dims, true) + 1e-5).rsqrt();
  const at::Tensor w = s.plain.named_parameters()["weight"].detach().to(at::kDouble);
  std::vector<int64_t> rows;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows.push_back(d);
  // gw = sum over rows of g (x^ - mean) rstd: linear in x^, unbiased.
  const Bound weight{(rstd.pow(2) * g.pow(2) * s.v).sum(rows), {}};
  return {normalization_input_bound(x - mean, s.v, g * w, rstd, rstd, dims, m), weight, Bound{}};
}

// An element-wise activation's input gradient g f'(x^), f' = `derivative`:
// by Taylor's theorem with E[x^ - x] = 0, the bias is at most
// |g| sup|f'''| v / 2, and |f'(x^) - f'(x)| <= |x^ - x| (|f''(x)| + sup|f'''| D)
// bounds the variance by g^2 (|f''(x)| + sup|f'''| D)^2 v. f'' and sup|f'''|
// are finite differences of f' in double precision (sup over [-12, 12]).
BoundFn elementwise_bounds(std::function<at::Tensor(const at::Tensor&)> derivative) {
  return [derivative](const Saved& s) {
    constexpr double kH = 1e-3;
    const at::Tensor grid = at::arange(-12.0, 12.0, kH, at::kDouble);
    const double third = ((derivative(grid + kH) - 2 * derivative(grid) + derivative(grid - kH)) / (kH * kH))
                             .abs().max().item<double>() * 1.05 + 1e-3;
    const at::Tensor x = s.x.to(at::kDouble), g = s.gy.to(at::kDouble);
    const at::Tensor second = (derivative(x + 1e-4) - derivative(x - 1e-4)) / 2e-4;
    const at::Tensor step = 2 * s.v.sqrt();
    return std::vector<Bound>{{g.pow(2) * (second.abs() + third * step).pow(2) * s.v, g.abs() * (third / 2) * s.v}};
  };
}

// Softmax along the last dim from its saved output y^ = y + e:
//   gx_i = y^_i (g_i - sum_j y^_j g_j).
// E[y^_i sum_j y^_j g_j] = y_i s + v_i g_i (s = sum y g): bias <= v_i |g_i|.
// gx_i - E gx_i is e_i (g_i - s) - y_i E + (E[e_i E] - e_i E), E = sum_j e_j g_j,
// so Var <= 3 [v_i (g_i - s)^2 + y_i^2 Var E + E(e_i E)^2] with
// Var E = sum g^2 v and E(e_i E)^2 <= 2 g_i^2 E e_i^4 + 2 v_i Var E <= 8 g_i^2 v_i^2 + 2 v_i Var E.
std::vector<Bound> softmax_bounds(const Saved& s) {
  const at::Tensor y = s.value.to(at::kDouble), g = s.gy.to(at::kDouble), v = s.v;
  const at::Tensor sum_yg = (y * g).sum(-1, true);
  const at::Tensor var_e = (g.pow(2) * v).sum(-1, true);
  const at::Tensor var = 3 * (v * (g - sum_yg).pow(2) + y.pow(2) * var_e + 8 * g.pow(2) * v.pow(2) + 2 * v * var_e);
  return {{var, v * g.abs()}};
}

// A lossy layer with the variance bound of its gradients.
struct Case : test::LayerCase {
  bool saves_output = false;  // Softmax saves y, the others x
  BoundFn bounds;             // one Bound per gradient: input, then parameters
};

// Every layer whose saved tensor is quantized (the lossless ones save masks,
// indices or nothing), with its bound: the layer's own backward over the
// variances where the gradient is linear in the saved tensor, a derived
// bound with a second-order bias allowance where it is not.
std::vector<Case> gradient_cases() {
  std::vector<Case> cases;
  for (test::LayerCase& layer : test::all_layer_cases()) {
    if (layer.lossless) continue;
    Case c;
    static_cast<test::LayerCase&>(c) = std::move(layer);
    const auto call = c.call;
    if (c.name == "BatchNorm1d" || c.name == "BatchNorm2d") {
      c.bounds = batch_norm_bounds;
    } else if (c.name == "LayerNorm") {
      c.bounds = layer_norm_bounds;
    } else if (c.name == "GELU") {
      c.bounds = elementwise_bounds([](const at::Tensor& t) { return at::gelu_backward(at::ones_like(t), t); });
    } else if (c.name == "SiLU") {
      c.bounds = elementwise_bounds([](const at::Tensor& t) { return at::silu_backward(at::ones_like(t), t); });
    } else if (c.name == "Softmax") {
      c.bounds = softmax_bounds;
      c.saves_output = true;
    } else {  // convolutions, Linear: the gradient is linear in the saved tensor
      c.bounds = [call](const Saved& s) { return weight_sum_bounds(s, call); };
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// Gradients of one forward/backward: input first, then parameters.
std::vector<at::Tensor> gradients(torch::nn::Module& m, const Case& c, const at::Tensor& x, const at::Tensor& gy) {
  for (auto& p : m.parameters()) p.mutable_grad() = at::Tensor();
  const at::Tensor xin = x.clone().requires_grad_();
  c.call(m, xin).backward(gy);
  std::vector<at::Tensor> out{xin.grad()};
  for (auto& p : m.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return out;
}

// The bits every draw stored for its one saved tensor: the same for every
// draw (no step() in between), so one variance bound serves them all.
const CompressedMeta& common_meta(const RecordingOffload& rec) {
  EXPECT_EQ(rec.metas.size(), size_t(kSeeds));
  for (const CompressedMeta& m : rec.metas) {
    EXPECT_EQ(m.bits, rec.metas.front().bits);
    EXPECT_EQ(m.sample_bits, rec.metas.front().sample_bits);
  }
  return rec.metas.front();
}

class UnbiasedGradientTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override { at::manual_seed(1234); }
  Case c = gradient_cases()[GetParam()];
};

std::string gradient_case_name(const ::testing::TestParamInfo<size_t>& info) { return gradient_cases()[info.param].name; }

}  // namespace

TEST_P(UnbiasedGradientTest, MeanOverSeedsApproachesTheFp32Gradient) {
  auto plain = c.make_plain();
  const at::Tensor x = at::randn(c.input_shape);
  const at::Tensor y = c.call(*plain, x);
  const at::Tensor gy = at::randn_like(y);
  const std::vector<at::Tensor> ref = gradients(*plain, c, x, gy);
  for (const std::string& level : levels()) {
    auto rec = std::make_shared<RecordingOffload>();
    auto q = c.wrap(plain, std::make_shared<Controller>(parse_level(level), 7, rec));
    std::vector<at::Tensor> sum(ref.size());
    for (int s = 0; s < kSeeds; ++s) {
      const std::vector<at::Tensor> got = gradients(*q, c, x, gy);
      for (size_t i = 0; i < got.size(); ++i) {
        if (!got[i].defined()) continue;
        sum[i] = sum[i].defined() ? sum[i] + got[i].to(at::kDouble) : got[i].to(at::kDouble);
      }
    }
    const CompressedMeta& meta = common_meta(*rec);
    const at::Tensor saved = c.saves_output ? y.detach() : x;
    const std::vector<Bound> bounds = c.bounds({x, gy, saved, rounding_variance(saved, meta), *plain});
    ASSERT_EQ(bounds.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!ref[i].defined()) continue;
      ASSERT_TRUE(sum[i].defined()) << level << " grad " << i;
      expect_estimates(sum[i] / kSeeds, ref[i], bounds[i], c.name + " at " + level + ", grad " + std::to_string(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LossyLayers, UnbiasedGradientTest, ::testing::Range<size_t>(0, gradient_cases().size()),
                         gradient_case_name);

// MatMul saves both operands quantized: ga = g b^T and gb = a^T g are each
// linear in one saved operand, so Var ga = g^2 v_b^T and Var gb = v_a^T g^2.
TEST(UnbiasedGradients, MatMulMeanOverSeedsApproachesTheFp32Gradient) {
  at::manual_seed(1234);
  const at::Tensor a = at::randn({3, 5, 40});
  const at::Tensor b = at::randn({3, 40, 4}) * 3;
  const at::Tensor gy = at::randn({3, 5, 4});
  const at::Tensor ra = a.clone().requires_grad_(), rb = b.clone().requires_grad_();
  at::matmul(ra, rb).backward(gy);
  for (const std::string& level : levels()) {
    auto rec = std::make_shared<RecordingOffload>();
    QMatMul mm(std::make_shared<Controller>(parse_level(level), 7, rec), "scores");
    at::Tensor sum_a = at::zeros(a.sizes(), at::kDouble), sum_b = at::zeros(b.sizes(), at::kDouble);
    for (int s = 0; s < kSeeds; ++s) {
      const at::Tensor qa = a.clone().requires_grad_(), qb = b.clone().requires_grad_();
      mm->forward(qa, qb).backward(gy);
      sum_a += qa.grad().to(at::kDouble);
      sum_b += qb.grad().to(at::kDouble);
    }
    // Payloads alternate a, b; each operand's bits are the same every draw.
    ASSERT_EQ(rec->metas.size(), size_t(2 * kSeeds));
    for (size_t i = 2; i < rec->metas.size(); ++i) EXPECT_EQ(rec->metas[i].sample_bits, rec->metas[i % 2].sample_bits);
    const at::Tensor va = rounding_variance(a, rec->metas[0]), vb = rounding_variance(b, rec->metas[1]);
    const at::Tensor g2 = gy.to(at::kDouble).pow(2);
    expect_estimates(sum_a / kSeeds, ra.grad(), {g2.matmul(vb.transpose(-1, -2)), {}}, "MatMul a at " + level);
    expect_estimates(sum_b / kSeeds, rb.grad(), {va.transpose(-1, -2).matmul(g2), {}}, "MatMul b at " + level);
  }
}
