// Pooling: what each keeps for backward.
//   MaxPool  the argmax inside each window (an index codec)
//   AvgPool  nothing but the input's shape
#include <cmath>

#include "actkit/core/codecs/bitfield_codecs.h"
#include "actkit/layers/functional.h"
#include "autograd_common.h"

namespace actkit {
namespace {

using namespace detail;

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
