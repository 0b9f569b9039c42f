// Convolution, linear and matmul: each saves its quantized input(s); the
// weights are parameters and are kept as they are.
#include "actkit/layers/functional.h"
#include "autograd_common.h"

namespace actkit {
namespace {

using namespace detail;

int64_t product(at::IntArrayRef sizes) {
  int64_t p = 1;
  for (int64_t s : sizes) p *= s;
  return p;
}

struct ConvFunction : torch::autograd::Function<ConvFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const c10::optional<at::Tensor>& b, const ConvParams& p, const LayerHandle& layer) {
    at::Tensor y = at::convolution(x, w, b, p.stride, p.padding, p.dilation, p.transposed, p.output_padding, p.groups);
    // ActNN App. B: a convolution's sensitivity carries K / (I * A) with K
    // kernel positions, I output positions and A groups.
    const double k = double(product(w.sizes().slice(2)));
    const double i = double(std::max<int64_t>(1, product(y.sizes().slice(2))));
    save_object(ctx, "x", layer.controller->save(layer.id, x, k / (i * double(p.groups))));
    save_object(ctx, "params", p);
    save_object(ctx, "layer", layer);
    ctx->saved_data["has_bias"] = defined(b);
    ctx->save_for_backward({w});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const at::Tensor w = ctx->get_saved_variables()[0];
    const ConvParams& p = load_object<ConvParams>(ctx, "params");
    begin_backward(ctx, g);
    const at::Tensor x = load_decoded(ctx, "x");
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const int64_t out_channels = p.transposed ? w.size(1) * p.groups : w.size(0);
    std::vector<int64_t> bias_sizes{out_channels};
    auto grads_in = at::convolution_backward(
        g, x, w, has_bias ? c10::OptionalIntArrayRef(bias_sizes) : c10::nullopt, p.stride, p.padding, p.dilation,
        p.transposed, p.output_padding, p.groups,
        {ctx->needs_input_grad(0), ctx->needs_input_grad(1), has_bias && ctx->needs_input_grad(2)});
    return {std::get<0>(grads_in), std::get<1>(grads_in), std::get<2>(grads_in), at::Tensor(), at::Tensor()};
  }
};

struct LinearFunction : torch::autograd::Function<LinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const c10::optional<at::Tensor>& b, const LayerHandle& layer) {
    at::Tensor y = at::linear(x, w, b);
    save_object(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    ctx->saved_data["has_bias"] = defined(b);
    ctx->save_for_backward({w});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const at::Tensor w = ctx->get_saved_variables()[0];
    begin_backward(ctx, g);
    at::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) gx = g.matmul(w);
    const at::Tensor g2 = g.reshape({-1, g.size(-1)});
    if (ctx->needs_input_grad(1)) {
      const at::Tensor x = load_decoded(ctx, "x");
      gw = g2.t().mm(x.reshape({-1, x.size(-1)}));
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) gb = g2.sum(0);
    return {gx, gw, gb, at::Tensor()};
  }
};

struct MatMulFunction : torch::autograd::Function<MatMulFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, const LayerHandle& layer) {
    at::Tensor y = at::matmul(a, b);
    // When a and b are the same tensor the controller shares one payload.
    save_object(ctx, "a", layer.controller->save(layer.id, a));
    save_object(ctx, "b", layer.controller->save(layer.id, b));
    save_object(ctx, "layer", layer);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    begin_backward(ctx, g);
    at::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) ga = g.matmul(load_decoded(ctx, "b").transpose(-1, -2));
    if (ctx->needs_input_grad(1)) gb = load_decoded(ctx, "a").transpose(-1, -2).matmul(g);
    return {ga, gb, at::Tensor()};
  }
};

}  // namespace

at::Tensor qconvolution(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                        const ConvParams& params, const LayerHandle& layer) {
  check_layer(layer, "qconvolution");
  return ConvFunction::apply(x, weight, bias, params, layer);
}

at::Tensor qlinear(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                   const LayerHandle& layer) {
  check_layer(layer, "qlinear");
  if (x.dim() < 1) throw InvalidInput("qlinear: the input needs rank >= 1");
  return LinearFunction::apply(x, weight, bias, layer);
}

at::Tensor qmatmul(const at::Tensor& a, const at::Tensor& b, const LayerHandle& layer) {
  check_layer(layer, "qmatmul");
  if (a.dim() < 2 || a.dim() != b.dim() || a.sizes().slice(0, a.dim() - 2) != b.sizes().slice(0, b.dim() - 2)) {
    throw InvalidInput(c10::str("qmatmul: needs operands of equal rank >= 2 and equal batch dims, got ", a.sizes(),
                                " and ", b.sizes()));
  }
  return MatMulFunction::apply(a, b, layer);
}

}  // namespace actkit
