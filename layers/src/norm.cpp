// Batch norm and layer norm: save the quantized input plus the small
// per-channel / per-row statistics the ATen backward needs.
#include "actkit/layers/functional.h"
#include "autograd_common.h"

namespace actkit {
namespace {

using namespace detail;

at::Tensor or_undefined(const c10::optional<at::Tensor>& t) { return t.has_value() ? *t : at::Tensor(); }

struct BatchNormFunction : torch::autograd::Function<BatchNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                            const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                            const c10::optional<at::Tensor>& running_var, double momentum, double eps,
                            const LayerHandle& layer) {
    auto [y, mean, invstd] = at::native_batch_norm(x, weight, bias, running_mean, running_var, /*training=*/true,
                                                   momentum, eps);
    save_object(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    ctx->saved_data["eps"] = eps;
    ctx->save_for_backward({or_undefined(weight), mean, invstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const auto saved = ctx->get_saved_variables();
    begin_backward(ctx, g);
    const at::Tensor x = load_decoded(ctx, "x");
    const at::Tensor& weight = saved[0];
    auto [gx, gw, gb] = at::native_batch_norm_backward(
        g.contiguous(), x, as_optional(weight), c10::nullopt,
        c10::nullopt, saved[1], saved[2], /*train=*/true, ctx->saved_data["eps"].toDouble(),
        {ctx->needs_input_grad(0), weight.defined() && ctx->needs_input_grad(1),
         weight.defined() && ctx->needs_input_grad(2)});
    return {gx, gw, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct LayerNormFunction : torch::autograd::Function<LayerNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> shape,
                            const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
                            double eps, const LayerHandle& layer) {
    auto [y, mean, rstd] = at::native_layer_norm(x, shape, weight, bias, eps);
    save_object(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    save_object(ctx, "shape", shape);
    ctx->save_for_backward({or_undefined(weight), or_undefined(bias), mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const auto saved = ctx->get_saved_variables();
    begin_backward(ctx, g);
    const at::Tensor x = load_decoded(ctx, "x");
    const at::Tensor& weight = saved[0];
    const at::Tensor& bias = saved[1];
    auto [gx, gw, gb] = at::native_layer_norm_backward(
        g.contiguous(), x, load_object<std::vector<int64_t>>(ctx, "shape"), saved[2], saved[3],
        as_optional(weight),
        as_optional(bias),
        // needs_input_grad counts tensor arguments only: x, then weight and
        // bias when present.
        {ctx->needs_input_grad(0), weight.defined() && ctx->needs_input_grad(1),
         bias.defined() && ctx->needs_input_grad(weight.defined() ? 2 : 1)});
    return {gx, at::Tensor(), gw, gb, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor qbatch_norm(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                       const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                       const c10::optional<at::Tensor>& running_var, double momentum, double eps,
                       const LayerHandle& layer) {
  check_layer(layer, "qbatch_norm");
  if (x.dim() < 2) throw InvalidInput(c10::str("qbatch_norm: needs (N, C, ...) input, got ", x.sizes()));
  return BatchNormFunction::apply(x, weight, bias, running_mean, running_var, momentum, eps, layer);
}

at::Tensor qlayer_norm(const at::Tensor& x, at::IntArrayRef normalized_shape, const c10::optional<at::Tensor>& weight,
                       const c10::optional<at::Tensor>& bias, double eps, const LayerHandle& layer) {
  check_layer(layer, "qlayer_norm");
  return LayerNormFunction::apply(x, normalized_shape.vec(), weight, bias, eps, layer);
}

}  // namespace actkit
