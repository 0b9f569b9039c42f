// Where one tensor feeds several consumers -- a residual block's branch and
// shortcut -- backward has to add up their gradients. LibTorch 1.13's engine
// always adds them out of place: the running sum, the new gradient and their
// sum, three tensors of the input's size alive at once, at the widest point
// of every residual network's backward. PyTorch 2.x adds in place when it
// holds the only reference. branch_point() gives every version the 2.x
// behaviour.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace actkit {

// `count` tensors that alias `x` (same storage and version counter, no copy),
// one per consumer, whose gradients one autograd node sums for `x`: in place
// into a gradient that nothing else references, out of place otherwise (and
// always out of place under create_graph, so double backward still works).
// Returns `count` handles to `x` itself when no gradient is recorded (x does
// not require grad, or grad mode is off).
// The node runs once every consumer's gradient has arrived, so it holds
// `count` gradients at once: for two consumers (the residual case) that is
// one fewer than autograd's running sum; for more it is not, and plain
// sharing of `x` is as good.
// Throws InvalidInput for an undefined `x` or `count` < 1.
std::vector<at::Tensor> branch_point(const at::Tensor& x, int64_t count = 2);

}  // namespace actkit
