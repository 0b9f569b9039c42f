// torch::nn modules that save compressed context for backward.
//
// Each Q-module wraps the LibTorch module it replaces and registers that
// module's own parameter and buffer tensors under the same names, so the
// state dict, the optimizer and the wrapped module all see one storage.
// forward() runs the wrapped module unchanged (bitwise the plain layer)
// unless compression is on: the module is training, gradients are needed,
// and the controller's level compresses this kind of layer. The module's
// own is_training() decides; eval mode and torch::NoGradGuard work as
// usual.
#pragma once

#include <torch/nn.h>

#include <memory>
#include <string>

#include "actkit/layers/functional.h"
#include "actkit/layers/layer_handle.h"

namespace actkit {

namespace detail {
// "torch::nn::Conv2dImpl" -> "actkit::QConv2d".
inline std::string q_module_name(const std::string& inner) {
  std::string base = inner.substr(inner.rfind(':') == std::string::npos ? 0 : inner.rfind(':') + 1);
  if (base.size() > 4 && base.compare(base.size() - 4, 4, "Impl") == 0) base.resize(base.size() - 4);
  return "actkit::Q" + base;
}
template <typename M>
std::string q_name_of(const std::shared_ptr<M>& inner) {
  return q_module_name(inner ? inner->name() : std::string("Module"));
}
}  // namespace detail

// Shared machinery of every Q-module; `Inner` is the wrapped LibTorch
// module type.
template <typename Inner>
class QModuleBase : public torch::nn::Module {
 public:
  using InnerType = Inner;
  // Wraps `inner` (shares its tensors) and registers a layer named `name` of
  // `kind` with `controller` (null: never compresses).
  QModuleBase(std::shared_ptr<Inner> inner, std::shared_ptr<Controller> controller, const std::string& name,
              LayerKind kind)
      : torch::nn::Module(detail::q_name_of(inner)), inner_(std::move(inner)), kind_(kind),
        layer_(std::move(controller), name, kind) {
    for (const auto& p : inner_->named_parameters(/*recurse=*/false)) {
      register_parameter(p.key(), p.value(), p.value().requires_grad());
    }
    for (const auto& b : inner_->named_buffers(/*recurse=*/false)) register_buffer(b.key(), b.value());
  }

  // The wrapped LibTorch module.
  const std::shared_ptr<Inner>& inner() const { return inner_; }
  // Whether forward(x) would save compressed context.
  bool compresses(const at::Tensor& x) const {
    if (!is_training() || !supported() || !layer_.compresses(kind_) || !at::GradMode::is_enabled()) return false;
    if (x.requires_grad()) return true;
    for (const auto& p : parameters(/*recurse=*/false)) {
      if (p.requires_grad()) return true;
    }
    return false;
  }
  // False when the wrapped module uses an option the compressed path does
  // not implement (it then always runs the plain module).
  virtual bool supported() const { return true; }

 protected:
  // The wrapped module's own forward, with our training flag.
  template <typename... Args>
  at::Tensor plain(Args&&... args) {
    inner_->train(is_training());
    return inner_->forward(std::forward<Args>(args)...);
  }

  std::shared_ptr<Inner> inner_;
  LayerKind kind_;
  LayerHandle layer_;
};

// Convolutions (zero padding given as numbers; other padding modes and
// "same"/"valid" run the plain module).
template <size_t D, typename Inner>
class QConvImpl : public QModuleBase<Inner> {
 public:
  using QModuleBase<Inner>::QModuleBase;
  bool supported() const override;
  at::Tensor forward(const at::Tensor& x);
};

template <size_t D, typename Inner>
class QConvTransposeImpl : public QModuleBase<Inner> {
 public:
  using QModuleBase<Inner>::QModuleBase;
  bool supported() const override;
  at::Tensor forward(const at::Tensor& x, const c10::optional<at::IntArrayRef>& output_size = c10::nullopt);

 protected:
  // Lets AnyModule / Sequential call forward(x) with the default.
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(c10::optional<at::IntArrayRef>())})
};

class QConv1dImpl : public QConvImpl<1, torch::nn::Conv1dImpl> {
 public:
  using QConvImpl::QConvImpl;
};
class QConv2dImpl : public QConvImpl<2, torch::nn::Conv2dImpl> {
 public:
  using QConvImpl::QConvImpl;
};
class QConv3dImpl : public QConvImpl<3, torch::nn::Conv3dImpl> {
 public:
  using QConvImpl::QConvImpl;
};
class QConvTranspose2dImpl : public QConvTransposeImpl<2, torch::nn::ConvTranspose2dImpl> {
 public:
  using QConvTransposeImpl::QConvTransposeImpl;
};

class QLinearImpl : public QModuleBase<torch::nn::LinearImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

template <typename Inner>
class QBatchNormImpl : public QModuleBase<Inner> {
 public:
  using QModuleBase<Inner>::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
  // forward() that, when it runs the compressed path, normalizes x in place
  // and returns it; otherwise the same as forward(x). Only for an x that
  // nothing else reads afterwards (conv_bn in converters/fused.h passes a
  // convolution's fresh output): saves one activation-sized tensor.
  at::Tensor forward_inplace(const at::Tensor& x);

 private:
  at::Tensor run(const at::Tensor& x, bool inplace);
};
class QBatchNorm1dImpl : public QBatchNormImpl<torch::nn::BatchNorm1dImpl> {
 public:
  using QBatchNormImpl::QBatchNormImpl;
};
class QBatchNorm2dImpl : public QBatchNormImpl<torch::nn::BatchNorm2dImpl> {
 public:
  using QBatchNormImpl::QBatchNormImpl;
};

class QLayerNormImpl : public QModuleBase<torch::nn::LayerNormImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

class QReLUImpl : public QModuleBase<torch::nn::ReLUImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

class QReLU6Impl : public QModuleBase<torch::nn::ReLU6Impl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

class QGELUImpl : public QModuleBase<torch::nn::GELUImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

class QSiLUImpl : public QModuleBase<torch::nn::SiLUImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

class QDropoutImpl : public QModuleBase<torch::nn::DropoutImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

class QSoftmaxImpl : public QModuleBase<torch::nn::SoftmaxImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

class QMaxPool2dImpl : public QModuleBase<torch::nn::MaxPool2dImpl> {
 public:
  using QModuleBase::QModuleBase;
  bool supported() const override;
  at::Tensor forward(const at::Tensor& x);
};

class QAvgPool2dImpl : public QModuleBase<torch::nn::AvgPool2dImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

// a @ b as a module (LibTorch has none), so that models can route attention
// products through something convert() can swap.
class MatMulImpl : public torch::nn::Module {
 public:
  MatMulImpl() : torch::nn::Module("actkit::MatMul") {}
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b) { return at::matmul(a, b); }
};

// The compressed MatMul: plain at::matmul unless compressing.
class QMatMulImpl : public QModuleBase<MatMulImpl> {
 public:
  QMatMulImpl(std::shared_ptr<MatMulImpl> inner, std::shared_ptr<Controller> controller, const std::string& name,
              LayerKind kind = LayerKind::kLinear)
      : QModuleBase(std::move(inner), std::move(controller), name, kind) {}
  QMatMulImpl(std::shared_ptr<Controller> controller, const std::string& name)
      : QMatMulImpl(std::make_shared<MatMulImpl>(), std::move(controller), name) {}
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b);
};

// RMS norm over the last dim with a learned scale, rounding as transformers'
// LlamaRMSNorm does (LibTorch 1.13 has no such module): rms_norm() in
// functional.h. `weight` starts at ones.
class RMSNormImpl : public torch::nn::Module {
 public:
  // Throws InvalidInput for size < 1 or eps < 0.
  explicit RMSNormImpl(int64_t size, double eps = 1e-6);
  at::Tensor forward(const at::Tensor& x);
  double eps() const { return eps_; }

  at::Tensor weight;

 private:
  double eps_;
};

// The compressed RMSNorm: saves the quantized input and the per-row rsqrt.
class QRMSNormImpl : public QModuleBase<RMSNormImpl> {
 public:
  using QModuleBase::QModuleBase;
  at::Tensor forward(const at::Tensor& x);
};

// a * b (same shape) as a module, so that a model's gating product
// (SwiGLU's silu(gate) * up) goes through something convert() can swap; as
// a plain tensor product autograd would keep both operands in fp32.
class MulImpl : public torch::nn::Module {
 public:
  MulImpl() : torch::nn::Module("actkit::Mul") {}
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b) { return a * b; }
};

// The compressed Mul: plain a * b unless compressing; then both operands
// quantized, each with its own budget (kind: activation).
class QMulImpl : public QModuleBase<MulImpl> {
 public:
  QMulImpl(std::shared_ptr<MulImpl> inner, std::shared_ptr<Controller> controller, const std::string& name,
           LayerKind kind = LayerKind::kActivation)
      : QModuleBase(std::move(inner), std::move(controller), name, kind) {}
  QMulImpl(std::shared_ptr<Controller> controller, const std::string& name)
      : QMulImpl(std::make_shared<MulImpl>(), std::move(controller), name) {}
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b);
};

TORCH_MODULE(QConv1d);
TORCH_MODULE(QConv2d);
TORCH_MODULE(QConv3d);
TORCH_MODULE(QConvTranspose2d);
TORCH_MODULE(QLinear);
TORCH_MODULE(QBatchNorm1d);
TORCH_MODULE(QBatchNorm2d);
TORCH_MODULE(QLayerNorm);
TORCH_MODULE(QReLU);
TORCH_MODULE(QReLU6);
TORCH_MODULE(QGELU);
TORCH_MODULE(QSiLU);
TORCH_MODULE(QDropout);
TORCH_MODULE(QSoftmax);
TORCH_MODULE(QMaxPool2d);
TORCH_MODULE(QAvgPool2d);
TORCH_MODULE(MatMul);
TORCH_MODULE(QMatMul);
TORCH_MODULE(RMSNorm);
TORCH_MODULE(QRMSNorm);
TORCH_MODULE(Mul);
TORCH_MODULE(QMul);

}  // namespace actkit
