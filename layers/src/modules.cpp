#include "actkit/layers/modules.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <variant>

#include "autograd_common.h"

namespace actkit {
namespace {

using detail::as_optional;

// The alternative T of a module option's variant, or nullptr. LibTorch 2.1
// made c10::variant std::variant; 1.13 has its own.
template <typename T, typename Variant>
const T* alternative(const Variant& v) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return std::get_if<T>(&v);
#else
  return c10::get_if<T>(&v);
#endif
}

template <size_t D>
std::vector<int64_t> vec(const torch::ExpandingArray<D>& a) {
  return std::vector<int64_t>(a->begin(), a->end());
}

}  // namespace

// --- convolutions -----------------------------------------------------------

template <size_t D, typename Inner>
bool QConvImpl<D, Inner>::supported() const {
  const auto& o = this->inner_->options;
  return alternative<torch::enumtype::kZeros>(o.padding_mode()) != nullptr &&
         alternative<torch::ExpandingArray<D>>(o.padding()) != nullptr;
}

template <size_t D, typename Inner>
at::Tensor QConvImpl<D, Inner>::forward(const at::Tensor& x) {
  if (!this->compresses(x)) return this->plain(x);
  const auto& o = this->inner_->options;
  ConvParams p;
  p.stride = vec<D>(o.stride());
  p.padding = vec<D>(*alternative<torch::ExpandingArray<D>>(o.padding()));
  p.dilation = vec<D>(o.dilation());
  p.output_padding.assign(D, 0);
  p.groups = o.groups();
  return qconvolution(x, this->inner_->weight, as_optional(this->inner_->bias), p, this->layer_);
}

template <size_t D, typename Inner>
bool QConvTransposeImpl<D, Inner>::supported() const {
  const auto& o = this->inner_->options;
  return alternative<torch::enumtype::kZeros>(o.padding_mode()) != nullptr &&
         alternative<torch::ExpandingArray<D>>(o.padding()) != nullptr;
}

template <size_t D, typename Inner>
at::Tensor QConvTransposeImpl<D, Inner>::forward(const at::Tensor& x,
                                                 const c10::optional<at::IntArrayRef>& output_size) {
  if (!this->compresses(x) || output_size.has_value()) {
    this->inner_->train(this->is_training());
    return this->inner_->forward(x, output_size);
  }
  const auto& o = this->inner_->options;
  ConvParams p;
  p.stride = vec<D>(o.stride());
  p.padding = vec<D>(*alternative<torch::ExpandingArray<D>>(o.padding()));
  p.dilation = vec<D>(o.dilation());
  p.transposed = true;
  p.output_padding = vec<D>(o.output_padding());
  p.groups = o.groups();
  return qconvolution(x, this->inner_->weight, as_optional(this->inner_->bias), p, this->layer_);
}

template class QConvImpl<1, torch::nn::Conv1dImpl>;
template class QConvImpl<2, torch::nn::Conv2dImpl>;
template class QConvImpl<3, torch::nn::Conv3dImpl>;
template class QConvTransposeImpl<2, torch::nn::ConvTranspose2dImpl>;

// --- linear and matmul ------------------------------------------------------

at::Tensor QLinearImpl::forward(const at::Tensor& x) {
  if (!compresses(x)) return plain(x);
  return qlinear(x, inner_->weight, as_optional(inner_->bias), layer_);
}

at::Tensor QMatMulImpl::forward(const at::Tensor& a, const at::Tensor& b) {
  // compresses() looks at one input; either operand needing a gradient counts.
  if (!compresses(a.requires_grad() ? a : b)) return at::matmul(a, b);
  return qmatmul(a, b, layer_);
}

// --- normalization ----------------------------------------------------------

template <typename Inner>
at::Tensor QBatchNormImpl<Inner>::forward(const at::Tensor& x) {
  return run(x, /*inplace=*/false);
}

template <typename Inner>
at::Tensor QBatchNormImpl<Inner>::forward_inplace(const at::Tensor& x) {
  return run(x, /*inplace=*/true);
}

template <typename Inner>
at::Tensor QBatchNormImpl<Inner>::run(const at::Tensor& x, bool inplace) {
  if (!this->compresses(x)) return this->plain(x);
  // The running-statistics bookkeeping of BatchNormImplBase::forward.
  auto& bn = *this->inner_;
  double momentum = bn.options.momentum().value_or(0.0);
  if (bn.options.track_running_stats() && bn.num_batches_tracked.defined()) {
    {
      at::NoGradGuard no_grad;
      bn.num_batches_tracked += 1;
    }
    if (!bn.options.momentum().has_value()) momentum = 1.0 / bn.num_batches_tracked.template item<double>();
  }
  return qbatch_norm(x, as_optional(bn.weight), as_optional(bn.bias), as_optional(bn.running_mean), as_optional(bn.running_var), momentum,
                     bn.options.eps(), this->layer_, inplace);
}

template class QBatchNormImpl<torch::nn::BatchNorm1dImpl>;
template class QBatchNormImpl<torch::nn::BatchNorm2dImpl>;

at::Tensor QLayerNormImpl::forward(const at::Tensor& x) {
  if (!compresses(x)) return plain(x);
  return qlayer_norm(x, inner_->options.normalized_shape(), as_optional(inner_->weight), as_optional(inner_->bias),
                     inner_->options.eps(), layer_);
}

RMSNormImpl::RMSNormImpl(int64_t size, double eps) : torch::nn::Module("actkit::RMSNorm"), eps_(eps) {
  if (size < 1 || !(eps >= 0)) {
    throw InvalidInput(c10::str("RMSNorm: needs size >= 1 and eps >= 0, got ", size, " and ", eps));
  }
  weight = register_parameter("weight", at::ones({size}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) { return rms_norm(x, weight, eps_); }

at::Tensor QRMSNormImpl::forward(const at::Tensor& x) {
  if (!compresses(x)) return plain(x);
  return qrms_norm(x, inner_->weight, inner_->eps(), layer_);
}

// --- element-wise product ---------------------------------------------------

at::Tensor QMulImpl::forward(const at::Tensor& a, const at::Tensor& b) {
  // As QMatMul: either operand needing a gradient counts.
  if (!compresses(a.requires_grad() ? a : b)) return plain(a, b);
  return qmul(a, b, layer_);
}

// --- activations and dropout ------------------------------------------------

at::Tensor QReLUImpl::forward(const at::Tensor& x) {
  return compresses(x) ? qrelu(x, layer_, inner()->options.inplace()) : plain(x);
}

at::Tensor QReLU6Impl::forward(const at::Tensor& x) { return compresses(x) ? qrelu6(x, layer_) : plain(x); }

at::Tensor QGELUImpl::forward(const at::Tensor& x) {
  return compresses(x) ? qgelu(x, inner_->options.approximate(), layer_) : plain(x);
}

at::Tensor QSiLUImpl::forward(const at::Tensor& x) { return compresses(x) ? qsilu(x, layer_) : plain(x); }

at::Tensor QDropoutImpl::forward(const at::Tensor& x) {
  return compresses(x) ? qdropout(x, inner_->options.p(), layer_) : plain(x);
}

at::Tensor QSoftmaxImpl::forward(const at::Tensor& x) {
  return compresses(x) ? qsoftmax(x, inner_->options.dim(), layer_) : plain(x);
}

// --- pooling ----------------------------------------------------------------

bool QMaxPool2dImpl::supported() const {
  const auto& k = inner_->options.kernel_size();
  return (*k)[0] * (*k)[1] <= 256;
}

at::Tensor QMaxPool2dImpl::forward(const at::Tensor& x) {
  if (!compresses(x)) return plain(x);
  const auto& o = inner_->options;
  return qmax_pool2d(x, vec<2>(o.kernel_size()), vec<2>(o.stride()), vec<2>(o.padding()), vec<2>(o.dilation()),
                     o.ceil_mode(), layer_);
}

at::Tensor QAvgPool2dImpl::forward(const at::Tensor& x) {
  if (!compresses(x)) return plain(x);
  const auto& o = inner_->options;
  return qavg_pool2d(x, vec<2>(o.kernel_size()), vec<2>(o.stride()), vec<2>(o.padding()), o.ceil_mode(),
                     o.count_include_pad(), o.divisor_override(), layer_);
}

}  // namespace actkit
