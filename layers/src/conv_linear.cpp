// Convolution, linear and matmul: each saves its quantized input(s); the
// weights are parameters and are kept as they are.
#include "actkit/layers/functional.h"
#include "autograd_common.h"
#include "gradient_sink.h"

namespace actkit {
namespace {

using namespace detail;

int64_t product(at::IntArrayRef sizes) {
  int64_t p = 1;
  for (int64_t s : sizes) p *= s;
  return p;
}

// Bytes of one sample of the convolution's output: a convolution that
// widens its input (1x1, 64 -> 256 channels) has a piece output four times
// its piece input.
int64_t output_bytes_per_sample(const at::Tensor& x, const at::Tensor& w, const ConvParams& p) {
  if (x.dim() < 3) return 0;
  const auto at = [](const std::vector<int64_t>& v, size_t i, int64_t fallback) {
    return v.empty() ? fallback : v[std::min(i, v.size() - 1)];
  };
  int64_t n = p.transposed ? w.size(1) * p.groups : w.size(0);
  for (int64_t d = 2; d < x.dim(); ++d) {
    const size_t i = size_t(d - 2);
    const int64_t in = x.size(d), k = w.size(d), s = at(p.stride, i, 1), pad = at(p.padding, i, 0);
    const int64_t dil = at(p.dilation, i, 1);
    const int64_t out = p.transposed ? (in - 1) * s - 2 * pad + dil * (k - 1) + at(p.output_padding, i, 0) + 1
                                     : (in + 2 * pad - dil * (k - 1) - 1) / s + 1;
    n *= std::max<int64_t>(out, 0);
  }
  return n * int64_t(x.element_size());
}

struct ConvFunction : torch::autograd::Function<ConvFunction> {
  // `sink`: the branch point x aliases (see branch_point.h), or null.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const c10::optional<at::Tensor>& b, const ConvParams& p, const LayerHandle& layer,
                            const std::shared_ptr<GradientSink>& sink) {
    at::Tensor y = piecewise_forward(x, w, b, p, layer);
    save_object(ctx, "sink", sink);
    save_activation(ctx, "x",
                    layer.controller->save(layer.id, x, conv_sensitivity_scale(x.sizes(), w.sizes(), p.groups)));
    save_object(ctx, "params", p);
    save_object(ctx, "layer", layer);
    ctx->saved_data["has_bias"] = defined(b);
    save_tensors(ctx, {w});
    return y;
  }

  // The convolution, a piece of the batch at a time when the input is large:
  // ATen's CPU and GPU convolutions allocate workspace (unfolded or
  // reordered copies of input and output) in proportion to the batch.
  static at::Tensor piecewise_forward(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                                      const ConvParams& p, const LayerHandle& layer) {
    const auto run = [&](const at::Tensor& x_part) {
      return at::convolution(x_part, w, b, p.stride, p.padding, p.dilation, p.transposed, p.output_padding, p.groups);
    };
    // Per sample: the input's workspace copy, the piece's output and its
    // workspace copy (the full output is not a temporary).
    const std::vector<SampleRange> pieces =
        pieces_of(layer, x.device(), x.dim() > 0 ? x.size(0) : 1, bytes_per_sample(x) + 2 * output_bytes_per_sample(x, w, p));
    if (x.dim() < 2 || pieces.size() == 1) return run(x);
    at::Tensor y;
    for (const SampleRange& piece : pieces) {
      const at::Tensor y_part = run(piece.of(x));
      if (!y.defined()) {
        std::vector<int64_t> shape = y_part.sizes().vec();
        shape[0] = x.size(0);
        y = at::empty(shape, y_part.options().memory_format(at::MemoryFormat::Contiguous));
      }
      piece.of(y).copy_(y_part);
    }
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const at::Tensor w = ctx->get_saved_variables()[0];
    const ConvParams& p = load_object<ConvParams>(ctx, "params");
    const LayerHandle& layer = begin_backward(ctx, g);
    const CompressedTensor x = load_saved(ctx, "x");
    const bool need_x = ctx->needs_input_grad(0);
    const bool need_w = ctx->needs_input_grad(1);
    const bool need_b = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    const auto run = [&](const at::Tensor& g_part, const at::Tensor& x_part, bool bias) {
      const int64_t out_channels = p.transposed ? w.size(1) * p.groups : w.size(0);
      std::vector<int64_t> bias_sizes{out_channels};
      return at::convolution_backward(g_part, x_part, w, bias ? c10::OptionalIntArrayRef(bias_sizes) : c10::nullopt,
                                      p.stride, p.padding, p.dilation, p.transposed, p.output_padding, p.groups,
                                      {need_x, need_w, bias});
    };
    // Per sample: the decoded input, its gradient, and about as much again
    // of ATen workspace (reordered or unfolded copies of input and gradient).
    const std::vector<SampleRange> pieces =
        backward_pieces(layer, x, 2 * bytes_per_sample(g) + 2 * bytes_per_sample(x));
    // An input that is a branch point's alias hands its gradient to the
    // branch point's sink; if a gradient waits there already, each piece is
    // added into it rather than into a new input-sized tensor.
    const auto& sink = load_object<std::shared_ptr<GradientSink>>(ctx, "sink");
    const bool to_sink = sink && need_x && !at::GradMode::is_enabled();
    const auto hand_over = [&](at::Tensor gx) {
      if (!to_sink) return gx;
      sink->put(std::move(gx));
      return at::Tensor();
    };
    if (pieces.size() == 1) {
      auto [gx, gw, gb] = run(g, x.decode(), need_b);
      return {hand_over(std::move(gx)), gw, gb, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    // Samples are independent: each piece's input gradient lands in its rows
    // of gx; weight gradients add up.
    at::Tensor gx = to_sink ? sink->take_writable() : at::Tensor();
    const bool add = gx.defined() && gx.sizes().equals(x.shape()) && gx.scalar_type() == g.scalar_type() &&
                     gx.is_contiguous();
    if (gx.defined() && !add) sink->put(std::move(gx));  // not one to write into (never in practice)
    if (!add && need_x) gx = at::empty(x.shape(), g.options().memory_format(at::MemoryFormat::Contiguous));
    at::Tensor gw;
    for (const SampleRange& piece : pieces) {
      auto [gx_part, gw_part, unused] = run(piece.of(g), decode_piece(x, piece), false);
      if (add) {
        piece.of(gx).add_(gx_part);
      } else if (need_x) {
        piece.of(gx).copy_(gx_part);
      }
      if (need_w) accumulate(gw, gw_part);
    }
    gx = hand_over(std::move(gx));
    at::Tensor gb;
    if (need_b) {
      std::vector<int64_t> dims{0};
      for (int64_t d = 2; d < g.dim(); ++d) dims.push_back(d);
      gb = g.sum(dims);
    }
    return {gx, gw, gb, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct LinearFunction : torch::autograd::Function<LinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const c10::optional<at::Tensor>& b, const LayerHandle& layer) {
    at::Tensor y = at::linear(x, w, b);
    save_activation(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    ctx->saved_data["has_bias"] = defined(b);
    save_tensors(ctx, {w});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const at::Tensor w = ctx->get_saved_variables()[0];
    const LayerHandle& layer = begin_backward(ctx, g);
    at::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) gx = g.matmul(w);
    const at::Tensor g2 = g.reshape({-1, g.size(-1)});
    if (ctx->needs_input_grad(1)) {
      const CompressedTensor x = load_saved(ctx, "x");
      // g.matmul(w) needs no input; the weight gradient sums over pieces of
      // the batch, each decoded on its own.
      for (const SampleRange& piece : backward_pieces(layer, x, bytes_per_sample(g))) {
        const at::Tensor x_part = decode_piece(x, piece);
        const at::Tensor g_part = x.shape().size() < 2 ? g2 : piece.of(g).reshape({-1, g.size(-1)});
        const at::Tensor part = g_part.t().mm(x_part.reshape({-1, x_part.size(-1)}));
        accumulate(gw, part);
      }
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) gb = g2.sum(0);
    return {gx, gw, gb, at::Tensor()};
  }
};

struct MatMulFunction : torch::autograd::Function<MatMulFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, const LayerHandle& layer) {
    at::Tensor y = at::matmul(a, b);
    // Two budgets (slots 0 and 1): the operands differ in size (attention's
    // p is T/d times v). When a and b are the same tensor the controller
    // shares one payload.
    save_activation(ctx, "a", layer.controller->save(layer.id, a, 1.0, /*slot=*/0));
    save_activation(ctx, "b", layer.controller->save(layer.id, b, 1.0, /*slot=*/1));
    save_object(ctx, "layer", layer);
    save_tensors(ctx);
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

double conv_sensitivity_scale(at::IntArrayRef input_sizes, at::IntArrayRef weight_sizes, int64_t groups) {
  const size_t spatial = weight_sizes.size() < 3 ? 0 : weight_sizes.size() - 2;
  // Batched (N, C, spatial...) or unbatched (C, spatial...) input.
  if (spatial == 0 || input_sizes.size() < spatial + 1 || input_sizes.size() > spatial + 2 || groups < 1) {
    throw InvalidInput(c10::str("conv_sensitivity_scale: needs a weight of rank >= 3, an input with as many spatial "
                                "dims and groups >= 1, got ", input_sizes, ", ", weight_sizes, ", ", groups));
  }
  // K: the kernel's positions. I: the input's positions, also for a
  // transposed convolution (a convolution with stride 1/s over its input).
  const double k = double(product(weight_sizes.slice(2)));
  const double i = double(std::max<int64_t>(1, product(input_sizes.slice(input_sizes.size() - spatial))));
  return k / (i * double(groups));
}

at::Tensor qconvolution(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                        const ConvParams& params, const LayerHandle& layer) {
  check_layer(layer, "qconvolution");
  return ConvFunction::apply(x, weight, bias, params, layer, detail::sink_of(x));
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
