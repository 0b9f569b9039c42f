// RMS norm (Llama, Qwen2): saves the quantized input plus the per-row
// rsqrt; backward recomputes the normalized input from the decoded copy.
#include "actkit/layers/functional.h"
#include "autograd_common.h"

namespace actkit {
namespace {

using namespace detail;

// fp32 for fp32 and the 16-bit types, as transformers' LlamaRMSNorm; fp64
// stays fp64 (that class would round it to fp32).
at::ScalarType rms_compute_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// 1 / sqrt(mean(x^2) + eps) per row, keeping the last dim (size 1), in the
// compute type; `xc` is x already in that type.
at::Tensor rms_rsqrt(const at::Tensor& xc, double eps) { return at::rsqrt(xc.pow(2).mean(-1, true) + eps); }

void check_rms_weight(const at::Tensor& x, const at::Tensor& weight, const char* what) {
  if (x.dim() < 1 || !weight.defined() || weight.dim() != 1 || weight.size(0) != x.size(-1)) {
    throw InvalidInput(c10::str(what, ": needs a weight of x's last dim, got x ", x.sizes(), " and weight ",
                                weight.defined() ? weight.sizes() : at::IntArrayRef{}));
  }
}

struct RMSNormFunction : torch::autograd::Function<RMSNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps,
                            const LayerHandle& layer) {
    // rms_norm()'s steps, kept here to also keep r.
    const at::Tensor xc = x.to(rms_compute_type(x));
    const at::Tensor r = rms_rsqrt(xc, eps);
    const at::Tensor y = weight * (xc * r).to(x.scalar_type());
    save_activation(ctx, "x", layer.controller->save(layer.id, x));
    save_object(ctx, "layer", layer);
    save_tensors(ctx, {weight, r});
    return y;
  }

  // With n = x * r (rows of H values), y = w * n and r = (mean(x^2) + eps)^-1/2:
  //   dL/dx = r * (gn - n * mean(gn * n)),  gn = g * w;   dL/dw = sum over rows of g * n.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const auto saved = ctx->get_saved_variables();
    const LayerHandle& layer = begin_backward(ctx, g);
    const CompressedTensor x = load_saved(ctx, "x");
    const at::Tensor& weight = saved[0];
    const at::Tensor& r = saved[1];
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const auto dtype = x.dtype();
    const auto run = [&](const at::Tensor& g_part, const at::Tensor& x_part, const at::Tensor& r_part) {
      const at::Tensor n = x_part.to(r.scalar_type()) * r_part;
      at::Tensor gx, gw;
      if (need_x) {
        const at::Tensor gn = (g_part * weight).to(r.scalar_type());
        gx = ((gn - n * (gn * n).mean(-1, true)) * r_part).to(dtype);
      }
      if (need_w) gw = (g_part * n.to(dtype)).reshape({-1, weight.size(0)}).sum(0);
      return std::make_pair(gx, gw);
    };
    // Rows normalize independently: pieces along dim 0 for a batch of rows.
    const bool batched = x.shape().size() > 1;
    const std::vector<SampleRange> pieces = batched ? backward_pieces(layer, x, 3 * bytes_per_sample(g))
                                                    : std::vector<SampleRange>{{0, x.shape()[0]}};
    if (pieces.size() == 1) {
      auto [gx, gw] = run(g, x.decode(), r);
      return {gx, gw, at::Tensor(), at::Tensor()};
    }
    at::Tensor gx = need_x ? at::empty(x.shape(), g.options().memory_format(at::MemoryFormat::Contiguous))
                           : at::Tensor();
    at::Tensor gw;
    for (const SampleRange& piece : pieces) {
      auto [gx_part, gw_part] = run(piece.of(g), decode_piece(x, piece), piece.of(r));
      if (need_x) piece.of(gx).copy_(gx_part);
      if (need_w) accumulate(gw, gw_part);
    }
    return {gx, gw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_weight(x, weight, "rms_norm");
  // transformers' LlamaRMSNorm, operation by operation, so that fp32 values
  // agree bit for bit on one LibTorch: upcast, x * rsqrt(mean(x^2) + eps),
  // cast back, then the weight.
  const at::Tensor xc = x.to(rms_compute_type(x));
  return weight * (xc * rms_rsqrt(xc, eps)).to(x.scalar_type());
}

at::Tensor qrms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, const LayerHandle& layer) {
  check_layer(layer, "qrms_norm");
  check_rms_weight(x, weight, "qrms_norm");
  return RMSNormFunction::apply(x, weight, eps, layer);
}

}  // namespace actkit
