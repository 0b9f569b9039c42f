// Element-wise activations, dropout, softmax and pooling.
//   ReLU, Dropout  1-bit mask             GELU, SiLU  quantized input
//   Softmax        quantized output       MaxPool     argmax inside the window
//   AvgPool        nothing (input shape only)
#include <cmath>

#include "actkit/core/bitfield_codecs.h"
#include "actkit/layers/functional.h"
#include "autograd_common.h"

namespace actkit {
namespace {

using namespace detail;

// Saves a mask for backward and books its bytes with the controller.
void save_mask(AutogradContext* ctx, const LayerHandle& layer, CompressedTensor mask, const at::Tensor& of) {
  save_activation(ctx, "mask", layer.controller->keep(std::move(mask), int64_t(of.numel() * of.element_size())));
}

// Element-wise backward `fn(g, saved)` over pieces of the batch (see
// backward_pieces): each piece decodes only its samples of `saved`.
template <typename Fn>
at::Tensor piecewise(const LayerHandle& layer, const CompressedTensor& saved, const at::Tensor& g, const Fn& fn) {
  // Per sample: the decoded piece, fn's result and its copy into `out`.
  const std::vector<SampleRange> pieces = backward_pieces(layer, saved, 2 * bytes_per_sample(g));
  if (pieces.size() == 1) return fn(g, saved.decode());
  at::Tensor out = at::empty(g.sizes(), g.options().memory_format(at::MemoryFormat::Contiguous));
  for (const SampleRange& piece : pieces) piece.of(out).copy_(fn(piece.of(g), decode_piece(saved, piece)));
  return out;
}

// ReLU and ReLU6: the gradient passes where a 1-bit mask says so.
enum class MaskedActivation { kReLU, kReLU6 };

struct MaskedActivationFunction : torch::autograd::Function<MaskedActivationFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, MaskedActivation kind,
                            const LayerHandle& layer, bool inplace) {
    at::Tensor y;
    if (kind == MaskedActivation::kReLU) {
      // In place, as torchvision's ReLU(inplace=true): no second tensor of x's
      // size while the mask is made (the mask is all backward needs).
      if (inplace) {
        y = at::relu_(const_cast<at::Tensor&>(x));
        ctx->mark_dirty({x});
      } else {
        y = at::relu(x);
      }
      save_mask(ctx, layer, encode_positive_mask(y), x);
    } else {
      y = at::hardtanh(x, 0, 6);
      save_mask(ctx, layer, encode_mask(at::logical_and(x > 0, x < 6)), x);
    }
    save_object(ctx, "layer", layer);
    save_tensors(ctx);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const LayerHandle& layer = begin_backward(ctx, grads[0]);
    // Same values as the plain backward (+0 where the gradient is blocked).
    return {piecewise(layer, load_saved(ctx, "mask"), grads[0],
                      [](const at::Tensor& g, const at::Tensor& pass) { return at::where(pass, g, 0.0); }),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct GeluFunction : torch::autograd::Function<GeluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const std::string& approximate,
                            const LayerHandle& layer) {
    at::Tensor y = at::gelu(x, approximate);
    save_activation(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    save_object(ctx, "approximate", approximate);
    save_tensors(ctx);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    begin_backward(ctx, grads[0]);
    const LayerHandle& layer = load_object<LayerHandle>(ctx, "layer");
    const std::string& approximate = load_object<std::string>(ctx, "approximate");
    return {piecewise(layer, load_saved(ctx, "x"), grads[0],
                      [&](const at::Tensor& g, const at::Tensor& x) { return at::gelu_backward(g, x, approximate); }),
            at::Tensor(), at::Tensor()};
  }
};

struct SiluFunction : torch::autograd::Function<SiluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const LayerHandle& layer) {
    at::Tensor y = at::silu(x);
    save_activation(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    save_tensors(ctx);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    begin_backward(ctx, grads[0]);
    const LayerHandle& layer = load_object<LayerHandle>(ctx, "layer");
    return {piecewise(layer, load_saved(ctx, "x"), grads[0],
                      [](const at::Tensor& g, const at::Tensor& x) { return at::silu_backward(g, x); }),
            at::Tensor()};
  }
};

struct DropoutFunction : torch::autograd::Function<DropoutFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p, const LayerHandle& layer) {
    // The same steps as at::dropout's unfused path, so the same random
    // stream gives the same output.
    at::Tensor noise = at::empty_like(x, at::MemoryFormat::Contiguous);
    noise.bernoulli_(1 - p);
    save_mask(ctx, layer, encode_positive_mask(noise), x);
    noise.div_(1 - p);
    save_object(ctx, "layer", layer);
    ctx->saved_data["p"] = p;
    save_tensors(ctx);
    return x * noise;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const double p = ctx->saved_data["p"].toDouble();
    const LayerHandle& layer = load_object<LayerHandle>(ctx, "layer");
    return {piecewise(layer, load_saved(ctx, "mask"), grads[0],
                      [&](const at::Tensor& g, const at::Tensor& keep) {
                        return g * keep.to(g.scalar_type()).div_(1 - p);
                      }),
            at::Tensor(), at::Tensor()};
  }
};

struct SoftmaxFunction : torch::autograd::Function<SoftmaxFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim, const LayerHandle& layer) {
    at::Tensor y = at::softmax(x, dim);
    save_activation(ctx, "y", layer.controller->save(layer.id, y));
    save_object(ctx, "layer", layer);
    ctx->saved_data["dim"] = dim;
    save_tensors(ctx);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    begin_backward(ctx, grads[0]);
    const at::Tensor y = load_decoded(ctx, "y");
    const int64_t dim = ctx->saved_data["dim"].toInt();
    return {at::_softmax_backward_data(grads[0].contiguous(), y, dim, y.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

struct PoolParams {
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false;
  bool count_include_pad = true;
  c10::optional<int64_t> divisor;
  std::vector<int64_t> input_shape;
  at::TensorOptions input_options;
};

// Window-local argmax <-> flat index into the H*W plane.
at::Tensor window_origin(int64_t out_h, int64_t out_w, int64_t width, const PoolParams& p, const at::Tensor& like,
                         at::Tensor* h0, at::Tensor* w0) {
  const auto opts = like.options().dtype(at::kLong);
  *h0 = (at::arange(out_h, opts) * p.stride[0] - p.padding[0]).view({out_h, 1});
  *w0 = (at::arange(out_w, opts) * p.stride[1] - p.padding[1]).view({1, out_w});
  return *h0 * width + *w0;
}

struct MaxPoolFunction : torch::autograd::Function<MaxPoolFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const PoolParams& p, const LayerHandle& layer) {
    auto [y, idx] = at::max_pool2d_with_indices(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
    const int64_t width = x.size(-1);
    at::Tensor h0, w0;
    window_origin(y.size(-2), y.size(-1), width, p, idx, &h0, &w0);
    const at::Tensor h = idx.div(width, "floor");
    const at::Tensor w = idx - h * width;
    const at::Tensor local = (h - h0).div(p.dilation[0], "floor") * p.kernel[1] + (w - w0).div(p.dilation[1], "floor");
    const int64_t positions = p.kernel[0] * p.kernel[1];
    const int bits = std::max(1, int(std::ceil(std::log2(double(positions)))));
    CompressedTensor saved = encode_index(local.to(at::kByte), bits);
    save_activation(ctx, "index", layer.controller->keep(std::move(saved), int64_t(idx.numel() * idx.element_size())));
    PoolParams with_shape = p;
    with_shape.input_shape = x.sizes().vec();
    with_shape.input_options = x.options();
    save_object(ctx, "params", std::move(with_shape));
    save_object(ctx, "layer", layer);
    save_tensors(ctx);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const PoolParams& p = load_object<PoolParams>(ctx, "params");
    const at::Tensor local = load_decoded(ctx, "index").to(at::kLong);
    const int64_t width = p.input_shape.back();
    at::Tensor h0, w0;
    window_origin(g.size(-2), g.size(-1), width, p, local, &h0, &w0);
    const at::Tensor kh = local.div(p.kernel[1], "floor");
    const at::Tensor kw = local - kh * p.kernel[1];
    const at::Tensor idx = (h0 + kh * p.dilation[0]) * width + (w0 + kw * p.dilation[1]);
    // The ATen backward reads only the input's shape and layout.
    const at::Tensor shape_only = at::empty(p.input_shape, p.input_options);
    return {at::max_pool2d_with_indices_backward(g, shape_only, p.kernel, p.stride, p.padding, p.dilation,
                                                 p.ceil_mode, idx),
            at::Tensor(), at::Tensor()};
  }
};

struct AvgPoolFunction : torch::autograd::Function<AvgPoolFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const PoolParams& p, const LayerHandle& layer) {
    at::Tensor y = at::avg_pool2d(x, p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad, p.divisor);
    layer.controller->note_saved(int64_t(x.numel() * x.element_size()), 0);  // the plain op keeps x
    PoolParams with_shape = p;
    with_shape.input_shape = x.sizes().vec();
    with_shape.input_options = x.options();
    save_object(ctx, "params", std::move(with_shape));
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const PoolParams& p = load_object<PoolParams>(ctx, "params");
    const at::Tensor shape_only = at::empty(p.input_shape, p.input_options);
    return {at::avg_pool2d_backward(grads[0], shape_only, p.kernel, p.stride, p.padding, p.ceil_mode,
                                    p.count_include_pad, p.divisor),
            at::Tensor(), at::Tensor()};
  }
};

std::vector<int64_t> pair(at::IntArrayRef v, const char* what, const char* field) {
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return v.vec();
  throw InvalidInput(c10::str(what, ": ", field, " needs 1 or 2 values, got ", v.size()));
}

}  // namespace

at::Tensor qrelu(const at::Tensor& x, const LayerHandle& layer, bool inplace) {
  check_layer(layer, "qrelu");
  return MaskedActivationFunction::apply(x, MaskedActivation::kReLU, layer, inplace);
}

at::Tensor qrelu6(const at::Tensor& x, const LayerHandle& layer) {
  check_layer(layer, "qrelu6");
  return MaskedActivationFunction::apply(x, MaskedActivation::kReLU6, layer, false);
}

at::Tensor qgelu(const at::Tensor& x, const std::string& approximate, const LayerHandle& layer) {
  check_layer(layer, "qgelu");
  if (approximate != "none" && approximate != "tanh") {
    throw InvalidInput(c10::str("qgelu: approximate must be 'none' or 'tanh', got '", approximate, "'"));
  }
  return GeluFunction::apply(x, approximate, layer);
}

at::Tensor qsilu(const at::Tensor& x, const LayerHandle& layer) {
  check_layer(layer, "qsilu");
  return SiluFunction::apply(x, layer);
}

at::Tensor qdropout(const at::Tensor& x, double p, const LayerHandle& layer) {
  check_layer(layer, "qdropout");
  if (!(p >= 0 && p <= 1)) throw InvalidInput(c10::str("qdropout: p must be in [0, 1], got ", p));
  if (p == 0 || x.numel() == 0) return x;
  if (p == 1) return x * at::zeros({}, x.options());
  return DropoutFunction::apply(x, p, layer);
}

at::Tensor qsoftmax(const at::Tensor& x, int64_t dim, const LayerHandle& layer) {
  check_layer(layer, "qsoftmax");
  return SoftmaxFunction::apply(x, dim, layer);
}

at::Tensor qmax_pool2d(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, bool ceil_mode, const LayerHandle& layer) {
  check_layer(layer, "qmax_pool2d");
  PoolParams p;
  p.kernel = pair(kernel, "qmax_pool2d", "kernel");
  p.stride = stride.empty() ? p.kernel : pair(stride, "qmax_pool2d", "stride");
  p.padding = pair(padding, "qmax_pool2d", "padding");
  p.dilation = pair(dilation, "qmax_pool2d", "dilation");
  p.ceil_mode = ceil_mode;
  if (p.kernel[0] * p.kernel[1] > 256) {
    throw InvalidInput(c10::str("qmax_pool2d: windows over 256 positions do not fit 8-bit indices, got ",
                                p.kernel[0], "x", p.kernel[1]));
  }
  if (x.dim() != 3 && x.dim() != 4) throw InvalidInput(c10::str("qmax_pool2d: needs a 3-D or 4-D input, got ", x.sizes()));
  return MaxPoolFunction::apply(x, p, layer);
}

at::Tensor qavg_pool2d(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                       bool ceil_mode, bool count_include_pad, c10::optional<int64_t> divisor_override,
                       const LayerHandle& layer) {
  check_layer(layer, "qavg_pool2d");
  PoolParams p;
  p.kernel = pair(kernel, "qavg_pool2d", "kernel");
  p.stride = stride.empty() ? p.kernel : pair(stride, "qavg_pool2d", "stride");
  p.padding = pair(padding, "qavg_pool2d", "padding");
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  p.divisor = divisor_override;
  return AvgPoolFunction::apply(x, p, layer);
}

}  // namespace actkit
