// How parameter gradients live between training steps. A training loop calls
// Controller::reset_gradients(params) where it would call zero_grad(); the
// level's `grads` switch (GradientMemory) picks one of:
//  * drop: every gradient becomes undefined, as PyTorch 2.x's
//    zero_grad(set_to_none=true) does. Forward then runs without them, and
//    backward's first contribution becomes the gradient without a copy.
//    Right where the step peaks at the end of forward, holding every saved
//    activation, with no gradient yet.
//  * keep: the gradients are allocated zeroed once, before forward, as views
//    into one contiguous buffer, and zeroed in place after every step;
//    backward adds into them. Where the step peaks in backward, the
//    gradients exist there either way, so keeping them costs no peak; they
//    stay at one address for the whole run instead of being allocated again
//    in every backward into (and splitting) the free blocks a caching
//    allocator keeps for activation-sized tensors.
//  * auto (every preset): drop when the level compresses nothing (L0: the
//    fp32 activations make forward the peak); otherwise keep in the first
//    step, and from then on keep while the last step saved at least as many
//    compressed bytes as the gradients take, else drop. The first step may
//    keep at no extra cost: the optimizer's state (momentum, the gradients'
//    size) appears only after it.
// The values backward produces are the same whatever the choice (0 + g = g).
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace actkit {

// The mechanism under Controller::reset_gradients. keep = false: every
// gradient of `params` becomes undefined. keep = true: existing gradients
// are zeroed in place; missing ones are allocated zeroed, as views into one
// new contiguous buffer per device and dtype (contiguous whatever the
// parameter's memory format): one allocation rather than one per parameter,
// since a caching allocator gives each mid-sized request a segment of its
// own (PyTorch: 20 MiB for anything between 1 and 10 MiB). Parameters that
// do not require gradients are left alone. Throws whatever the allocation
// throws (OutOfMemory under a budget), every gradient left either ready or
// as it was.
void reset_gradients(const std::vector<at::Tensor>& params, bool keep);

// Bytes the gradients of `params` take (those that require gradients).
int64_t gradient_bytes(const std::vector<at::Tensor>& params);

}  // namespace actkit
