// Element-wise activations, dropout and softmax: what each keeps for backward.
//   ReLU, ReLU6, Dropout  a 1-bit mask
//   GELU, SiLU            the quantized input
//   Softmax               the quantized output
#include <cmath>

#include "actkit/core/codecs/bitfield_codecs.h"
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
    // The same steps as at::dropout's unfused path, the one it takes on the
    // CPU, so there one seed gives the plain layer's mask and output; on CUDA
    // at::dropout runs the fused native_dropout, which draws differently.
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

}  // namespace actkit
