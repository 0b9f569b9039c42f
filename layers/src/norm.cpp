// Batch norm and layer norm: save the quantized input plus the small
// per-channel / per-row statistics the ATen backward needs.
#include "actkit/layers/functional.h"
#include "autograd_common.h"

#include <array>
#include <tuple>

namespace actkit {
namespace {

using namespace detail;

at::Tensor or_undefined(const c10::optional<at::Tensor>& t) { return t.has_value() ? *t : at::Tensor(); }

struct BatchNormFunction : torch::autograd::Function<BatchNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                            const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                            const c10::optional<at::Tensor>& running_var, double momentum, double eps,
                            const LayerHandle& layer, bool inplace) {
    // Saved before an in-place normalization overwrites x.
    save_activation(ctx, "x", layer.controller->save(layer.id, x));
    at::Tensor y, mean, invstd;
    if (inplace && x.is_contiguous()) {
      // The batch statistics (and the running-statistics update) from the
      // same ATen reduction training-mode batch norm uses; then the affine
      // map ATen applies, y = x * (w * invstd) + (b - mean * w * invstd),
      // with per-channel factors, written over x.
      at::Tensor var;
      std::tie(mean, var) = at::batch_norm_update_stats(x, running_mean, running_var, momentum);
      invstd = var.add(eps).rsqrt_();
      std::vector<int64_t> channel_shape(size_t(x.dim()), 1);
      channel_shape[1] = x.size(1);
      const at::Tensor alpha = defined(weight) ? *weight * invstd : invstd;
      const at::Tensor beta = defined(bias) ? *bias - mean * alpha : -mean * alpha;
      y = const_cast<at::Tensor&>(x);
      y.mul_(alpha.reshape(channel_shape)).add_(beta.reshape(channel_shape));
      ctx->mark_dirty({x});
    } else {
      std::tie(y, mean, invstd) =
          at::native_batch_norm(x, weight, bias, running_mean, running_var, /*training=*/true, momentum, eps);
    }
    save_object(ctx, "layer", layer);
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["has_bias"] = defined(bias);
    save_tensors(ctx, {or_undefined(weight), mean, invstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const auto saved = ctx->get_saved_variables();
    const LayerHandle& layer = begin_backward(ctx, g);
    const CompressedTensor x = load_saved(ctx, "x");
    const at::Tensor& weight = saved[0];
    // needs_input_grad counts tensor arguments only: x, then weight and bias
    // when present. The bias gradient does not depend on the weight.
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::array<bool, 3> mask{ctx->needs_input_grad(0), weight.defined() && ctx->needs_input_grad(1),
                                   has_bias && ctx->needs_input_grad(weight.defined() ? 2 : 1)};
    // Each piece is decoded and turned into its gradient in place.
    const std::vector<SampleRange> pieces = backward_pieces(layer, x, 0);
    if (pieces.size() == 1) {
      auto [gx, gw, gb] = at::native_batch_norm_backward(g.contiguous(), x.decode(), as_optional(weight),
                                                         c10::nullopt, c10::nullopt, saved[1], saved[2],
                                                         /*train=*/true, ctx->saved_data["eps"].toDouble(), mask);
      return {gx, gw, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    auto [gx, gw, gb] = piecewise_backward(g, x, pieces, weight, saved[1], saved[2], mask);
    return {gx, gw, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }

  // Training-mode batch-norm backward with the input decoded a piece at a
  // time. The input gradient needs two batch-wide sums per channel,
  //   gx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)),
  // so a first pass over the pieces forms sum(g * xhat) and a second writes
  // gx; sum(g * xhat) is also the weight gradient and sum(g) the bias's.
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> piecewise_backward(
      const at::Tensor& g, const CompressedTensor& x, const std::vector<SampleRange>& pieces,
      const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& invstd, const std::array<bool, 3>& mask) {
    std::vector<int64_t> dims{0};
    std::vector<int64_t> channel_shape(x.shape().size(), 1);
    channel_shape[1] = x.shape()[1];
    for (int64_t d = 2; d < int64_t(x.shape().size()); ++d) dims.push_back(d);
    const auto per_channel = [&](const at::Tensor& t) { return t.reshape(channel_shape); };
    const at::Tensor mean_c = per_channel(mean);
    const at::Tensor invstd_c = per_channel(invstd);
    const at::Tensor sum_g = g.sum(dims);
    at::Tensor sum_g_xhat = at::zeros_like(sum_g);
    for (const SampleRange& piece : pieces) {
      at::Tensor t = decode_piece(x, piece);
      sum_g_xhat.add_(t.sub_(mean_c).mul_(piece.of(g)).sum(dims));
    }
    sum_g_xhat.mul_(invstd);
    at::Tensor gx;
    if (mask[0]) {
      const double count = double(x.numel() / x.shape()[1]);
      const at::Tensor scale = per_channel(weight.defined() ? weight * invstd : invstd);
      const at::Tensor mean_g = per_channel(sum_g / count);
      const at::Tensor mean_g_xhat = per_channel(sum_g_xhat / count);
      gx = at::empty(x.shape(), g.options().memory_format(at::MemoryFormat::Contiguous));
      for (const SampleRange& piece : pieces) {
        at::Tensor t = decode_piece(x, piece);  // becomes this piece's gx in place
        t.sub_(mean_c).mul_(invstd_c).mul_(mean_g_xhat).neg_().add_(piece.of(g)).sub_(mean_g).mul_(scale);
        piece.of(gx).copy_(t);
      }
    }
    return {gx, mask[1] ? sum_g_xhat : at::Tensor(), mask[2] ? sum_g : at::Tensor()};
  }
};

struct LayerNormFunction : torch::autograd::Function<LayerNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> shape,
                            const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
                            double eps, const LayerHandle& layer) {
    auto [y, mean, rstd] = at::native_layer_norm(x, shape, weight, bias, eps);
    save_activation(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    save_object(ctx, "shape", shape);
    save_tensors(ctx, {or_undefined(weight), or_undefined(bias), mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const auto saved = ctx->get_saved_variables();
    const LayerHandle& layer = begin_backward(ctx, g);
    const CompressedTensor x = load_saved(ctx, "x");
    const at::Tensor& weight = saved[0];
    const at::Tensor& bias = saved[1];
    const std::vector<int64_t>& shape = load_object<std::vector<int64_t>>(ctx, "shape");
    // needs_input_grad counts tensor arguments only: x, then weight and bias
    // when present.
    const std::array<bool, 3> mask{ctx->needs_input_grad(0), weight.defined() && ctx->needs_input_grad(1),
                                   bias.defined() && ctx->needs_input_grad(weight.defined() ? 2 : 1)};
    // Rows normalize independently: pieces along dim 0 when it is not one of
    // the normalized dims; weight and bias gradients add up over pieces.
    const bool batched = x.shape().size() > shape.size();
    const std::vector<SampleRange> pieces =
        batched ? backward_pieces(layer, x, 2 * bytes_per_sample(g)) : std::vector<SampleRange>{{0, x.shape()[0]}};
    const auto run = [&](const at::Tensor& g_part, const at::Tensor& x_part, const at::Tensor& mean,
                         const at::Tensor& rstd) {
      return at::native_layer_norm_backward(g_part.contiguous(), x_part, shape, mean, rstd, as_optional(weight),
                                            as_optional(bias), mask);
    };
    if (pieces.size() == 1) {
      auto [gx, gw, gb] = run(g, x.decode(), saved[2], saved[3]);
      return {gx, at::Tensor(), gw, gb, at::Tensor(), at::Tensor()};
    }
    at::Tensor gx = mask[0] ? at::empty(x.shape(), g.options().memory_format(at::MemoryFormat::Contiguous))
                            : at::Tensor();
    at::Tensor gw, gb;
    for (const SampleRange& piece : pieces) {
      auto [gx_part, gw_part, gb_part] =
          run(piece.of(g), decode_piece(x, piece), piece.of(saved[2]), piece.of(saved[3]));
      if (mask[0]) piece.of(gx).copy_(gx_part);
      if (mask[1]) accumulate(gw, gw_part);
      if (mask[2]) accumulate(gb, gb_part);
    }
    return {gx, at::Tensor(), gw, gb, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor qbatch_norm(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                       const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                       const c10::optional<at::Tensor>& running_var, double momentum, double eps,
                       const LayerHandle& layer, bool inplace) {
  check_layer(layer, "qbatch_norm");
  if (x.dim() < 2) throw InvalidInput(c10::str("qbatch_norm: needs (N, C, ...) input, got ", x.sizes()));
  return BatchNormFunction::apply(x, weight, bias, running_mean, running_var, momentum, eps, layer, inplace);
}

at::Tensor qlayer_norm(const at::Tensor& x, at::IntArrayRef normalized_shape, const c10::optional<at::Tensor>& weight,
                       const c10::optional<at::Tensor>& bias, double eps, const LayerHandle& layer) {
  check_layer(layer, "qlayer_norm");
  return LayerNormFunction::apply(x, normalized_shape.vec(), weight, bias, eps, layer);
}

}  // namespace actkit
