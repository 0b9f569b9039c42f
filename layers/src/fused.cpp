#include "actkit/layers/fused.h"

#include "actkit/layers/modules.h"

namespace actkit {
namespace {

namespace nn = torch::nn;

// A module whose output is a fresh tensor computed from its input by a
// convolution (plain or converted): safe for the next module to overwrite.
bool is_convolution(const nn::AnyModule& m) {
  const auto p = m.ptr();
  return std::dynamic_pointer_cast<nn::Conv1dImpl>(p) || std::dynamic_pointer_cast<nn::Conv2dImpl>(p) ||
         std::dynamic_pointer_cast<nn::Conv3dImpl>(p) || std::dynamic_pointer_cast<QConv1dImpl>(p) ||
         std::dynamic_pointer_cast<QConv2dImpl>(p) || std::dynamic_pointer_cast<QConv3dImpl>(p);
}

bool is_batch_norm(const nn::AnyModule& m) {
  const auto p = m.ptr();
  return std::dynamic_pointer_cast<nn::BatchNorm1dImpl>(p) || std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(p) ||
         std::dynamic_pointer_cast<QBatchNorm1dImpl>(p) || std::dynamic_pointer_cast<QBatchNorm2dImpl>(p);
}

}  // namespace

at::Tensor conv_bn(nn::AnyModule& conv, nn::AnyModule& bn, const at::Tensor& x) {
  at::Tensor y = conv.forward(x);
  const auto p = bn.ptr();
  if (auto q = std::dynamic_pointer_cast<QBatchNorm2dImpl>(p)) return q->forward_inplace(y);
  if (auto q = std::dynamic_pointer_cast<QBatchNorm1dImpl>(p)) return q->forward_inplace(y);
  return bn.forward(std::move(y));
}

at::Tensor forward_fused(nn::SequentialImpl& seq, at::Tensor x) {
  for (auto it = seq.begin(); it != seq.end(); ++it) {
    const auto next = it + 1;
    if (next != seq.end() && is_convolution(*it) && is_batch_norm(*next)) {
      x = conv_bn(*it, *next, x);
      it = next;
    } else {
      x = it->forward(std::move(x));
    }
  }
  return x;
}

}  // namespace actkit
