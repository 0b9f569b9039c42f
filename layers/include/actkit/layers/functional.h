// Compressed autograd operations (ActNN Sec. 5.1): each computes exactly what
// the plain ATen op computes in forward, but saves a compressed copy of what
// backward needs, and computes backward from it with public ATen ops
// (at::convolution_backward, at::native_batch_norm_backward, ...), so it
// builds on LibTorch 1.13 and 2.x alike.
//
// These always compress; the nn modules (modules.h) decide when to call
// them (training, gradients needed, and the level compresses that layer
// kind) and otherwise run the plain op. Every function throws
// actkit::InvalidInput for inputs the codecs reject (e.g. integer dtypes).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <vector>

#include "actkit/layers/layer_handle.h"

namespace actkit {

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;
  bool transposed = false;
  std::vector<int64_t> output_padding;
  int64_t groups = 1;
};

// Convolution of any dimensionality (1d/2d/3d, transposed or not); saves the
// quantized input.
at::Tensor qconvolution(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                        const ConvParams& params, const LayerHandle& layer);

// The factor K / (I * A) of a convolution's per-sample sensitivity (ActNN
// App. B.1): K positions of the kernel (weight dims 2..), I positions of the
// feature map X the layer saves -- its input, for transposed convolutions
// too -- and A groups. `input_sizes` is (N, C, spatial...) or unbatched
// (C, spatial...). Throws InvalidInput for a weight of rank < 3, an input
// whose spatial rank differs, or groups < 1.
double conv_sensitivity_scale(at::IntArrayRef input_sizes, at::IntArrayRef weight_sizes, int64_t groups);

// y = x W^T + b for x of any rank >= 1; saves the quantized input.
at::Tensor qlinear(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                   const LayerHandle& layer);

// Batched a @ b (same batch dimensions, rank >= 2); saves both operands
// quantized (each once if they are the same tensor).
at::Tensor qmatmul(const at::Tensor& a, const at::Tensor& b, const LayerHandle& layer);

// Training-mode batch norm over dim 1; updates running statistics like
// at::batch_norm. Saves the quantized input and the per-channel mean/invstd.
// With `inplace` the output overwrites x (the same values; x is returned):
// pass it only a tensor nothing else reads afterwards, such as a
// convolution's fresh output (see conv_bn in converters/fused.h); backward
// needs only the saved quantized copy.
at::Tensor qbatch_norm(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                       const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                       const c10::optional<at::Tensor>& running_var, double momentum, double eps,
                       const LayerHandle& layer, bool inplace = false);

// Layer norm over the trailing `normalized_shape`; saves the quantized input
// and the per-row mean/rstd.
at::Tensor qlayer_norm(const at::Tensor& x, at::IntArrayRef normalized_shape, const c10::optional<at::Tensor>& weight,
                       const c10::optional<at::Tensor>& bias, double eps, const LayerHandle& layer);

// RMS norm over the last dim, as transformers' LlamaRMSNorm computes it:
// x * rsqrt(mean(x^2, -1) + eps) in fp32 (fp16/bf16 inputs upcast, fp64
// stays fp64), cast back to x's dtype, then times `weight` (the size of x's
// last dim). rms_norm is the plain op; qrms_norm computes the same values
// and saves the quantized input and the per-row rsqrt for backward. Throws
// InvalidInput for a weight that does not match x's last dim.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
at::Tensor qrms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, const LayerHandle& layer);

// Element-wise a * b of one shape and dtype (SwiGLU's silu(gate) * up);
// saves both operands quantized (each once if they are the same tensor).
// Throws InvalidInput for operands that differ in shape or dtype.
at::Tensor qmul(const at::Tensor& a, const at::Tensor& b, const LayerHandle& layer);

// ReLU; saves a 1-bit mask. `inplace` overwrites x (which must not be a
// leaf that requires grad, as for at::relu_) and returns it.
at::Tensor qrelu(const at::Tensor& x, const LayerHandle& layer, bool inplace = false);
// ReLU6 (hardtanh to [0, 6]); saves a 1-bit mask of 0 < x < 6.
at::Tensor qrelu6(const at::Tensor& x, const LayerHandle& layer);
// GELU ("none" or "tanh") and SiLU; save the quantized input.
at::Tensor qgelu(const at::Tensor& x, const std::string& approximate, const LayerHandle& layer);
at::Tensor qsilu(const at::Tensor& x, const LayerHandle& layer);
// Training-mode dropout; saves a 1-bit mask. Draws its mask the way
// at::dropout does on the CPU (bernoulli_ on an input-shaped tensor), so one
// seed gives the plain layer's mask there; on CUDA at::dropout runs the
// fused native_dropout, whose mask differs (same distribution).
at::Tensor qdropout(const at::Tensor& x, double p, const LayerHandle& layer);
// Softmax along `dim`; saves the quantized output.
at::Tensor qsoftmax(const at::Tensor& x, int64_t dim, const LayerHandle& layer);

// Max pooling over the last two dims; saves the argmax position inside each
// window (at most 8 bits; windows up to 16x16).
at::Tensor qmax_pool2d(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, bool ceil_mode, const LayerHandle& layer);
// Average pooling; saves nothing but the input shape.
at::Tensor qavg_pool2d(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                       bool ceil_mode, bool count_include_pad, c10::optional<int64_t> divisor_override,
                       const LayerHandle& layer);

}  // namespace actkit
