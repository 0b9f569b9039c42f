// Running a convolution and the batch norm after it as one step, so the
// batch norm can overwrite the convolution's output instead of allocating
// a second activation-sized tensor (forward's peak in CNN blocks).
#pragma once

#include <torch/torch.h>

namespace actkit {

// bn(conv(x)). When `bn` is a converted batch norm that compresses (see
// QModuleBase::compresses), it normalizes the convolution's output in place:
// that tensor exists only inside this call, so nothing else can observe the
// overwrite, and the values are the same as out of place. Otherwise (plain
// modules, eval mode, no grad) exactly bn.forward(conv.forward(x)). Throws
// what the modules throw.
at::Tensor conv_bn(torch::nn::AnyModule& conv, torch::nn::AnyModule& bn, const at::Tensor& x);

// seq's forward, with each convolution child directly followed by a batch
// norm child run through conv_bn (in a Sequential a child's output feeds
// only the next child). Children must map one tensor to one tensor. Takes x
// by value: pass std::move(x) to let the input go once the first child has
// consumed it.
at::Tensor forward_fused(torch::nn::SequentialImpl& seq, at::Tensor x);

}  // namespace actkit
