// Where one tensor feeds several consumers -- a residual block's branch and
// shortcut -- backward has to add up their gradients. LibTorch 1.13's engine
// always adds them out of place: the running sum, the new gradient and their
// sum, three tensors of the input's size alive at once, at the widest point
// of every residual network's backward. PyTorch 2.x adds in place when it
// holds the only reference; both still form each consumer's gradient in a
// tensor of its own before adding.
//
// branch_point() and residual_add() do better on either version. The
// branch point's node sums in place, and it has a side door: residual_add()
// and ACTkit's compressed convolutions hand their gradient for an alias to
// it instead of returning it, and a compressed convolution that finds a
// gradient already waiting there adds its own into it a piece of the batch
// at a time (chunk_bytes) -- no gradient of the input's size of its own.
// In a residual block that leaves one input-sized gradient where autograd
// holds two or three.
//
//   const auto x = actkit::branch_point(input);           // branch, shortcut
//   at::Tensor out = bn2(conv2(relu(bn1(conv1(x[0])))));
//   out = actkit::residual_add(out, x[1]);                 // or downsample(x[1])
//
// Gradients reach `input` in full. What is not available is the gradient of
// an alias itself (torch::autograd::grad with an alias as input sees only
// what came through the engine): ask for `input`'s.
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
// The node runs once every consumer's gradient has arrived, so gradients
// returned the ordinary way wait there together: for two consumers (the
// residual case) that is one fewer than autograd's running sum; for more it
// is not, and plain sharing of `x` is as good.
// Throws InvalidInput for an undefined `x` or `count` < 1.
std::vector<at::Tensor> branch_point(const at::Tensor& x, int64_t count = 2);

// out += shortcut, in place, as `out += shortcut` records it; when
// `shortcut` is a branch_point() alias its gradient goes to the branch
// point's side door, where the branch's first compressed convolution adds
// into it. Returns `out`. Throws InvalidInput for undefined tensors or
// different shapes.
at::Tensor residual_add(at::Tensor& out, const at::Tensor& shortcut);

}  // namespace actkit
