// Element-wise product: saves both operands quantized (SwiGLU's silu(gate)
// and up), each with its own budget, as MatMul does.
#include "actkit/layers/functional.h"
#include "autograd_common.h"

namespace actkit {
namespace {

using namespace detail;

struct MulFunction : torch::autograd::Function<MulFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, const LayerHandle& layer) {
    at::Tensor y = a * b;
    // Slots 0 and 1: the operands' ranges differ (silu(gate) is nearly
    // non-negative, up is not). The same tensor twice is one payload.
    save_activation(ctx, "a", layer.controller->save(layer.id, a, 1.0, /*slot=*/0));
    save_activation(ctx, "b", layer.controller->save(layer.id, b, 1.0, /*slot=*/1));
    save_object(ctx, "layer", layer);
    save_tensors(ctx);
    return y;
  }

  // da = g * b, db = g * a, a piece of the batch at a time.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& g = grads[0];
    const LayerHandle& layer = begin_backward(ctx, g);
    const bool need_a = ctx->needs_input_grad(0), need_b = ctx->needs_input_grad(1);
    // Each operand's gradient reads the other one.
    const CompressedTensor a = need_b ? load_saved(ctx, "a") : CompressedTensor();
    const CompressedTensor b = need_a ? load_saved(ctx, "b") : CompressedTensor();
    if (!need_a && !need_b) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const CompressedTensor& any = need_a ? b : a;
    // Per sample: the decoded operands and the two gradients' pieces.
    const std::vector<SampleRange> pieces = backward_pieces(layer, any, 3 * bytes_per_sample(g));
    if (pieces.size() == 1) {
      return {need_a ? g * b.decode() : at::Tensor(), need_b ? g * a.decode() : at::Tensor(), at::Tensor()};
    }
    const auto make = [&](bool needed) {
      return needed ? at::empty(g.sizes(), g.options().memory_format(at::MemoryFormat::Contiguous)) : at::Tensor();
    };
    at::Tensor ga = make(need_a), gb = make(need_b);
    for (const SampleRange& piece : pieces) {
      if (need_a) {
        at::Tensor out = piece.of(ga);
        at::mul_out(out, piece.of(g), decode_piece(b, piece));
      }
      if (need_b) {
        at::Tensor out = piece.of(gb);
        at::mul_out(out, piece.of(g), decode_piece(a, piece));
      }
    }
    return {ga, gb, at::Tensor()};
  }
};

}  // namespace

at::Tensor qmul(const at::Tensor& a, const at::Tensor& b, const LayerHandle& layer) {
  check_layer(layer, "qmul");
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) {
    throw InvalidInput(c10::str("qmul: needs operands of one shape and dtype, got ", a.sizes(), " ", a.scalar_type(),
                                " and ", b.sizes(), " ", b.scalar_type()));
  }
  return MulFunction::apply(a, b, layer);
}

}  // namespace actkit
