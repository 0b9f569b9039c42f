// How parameter gradients live between training steps: the one call a
// training loop makes where it would call optimizer.zero_grad().
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "actkit/core/level.h"

namespace actkit {

// Readies the gradients of `params` for the next backward, as
// `config.keep_gradients` says:
//  * dropped (L0-L2): every gradient becomes undefined, as PyTorch 2.x's
//    zero_grad(set_to_none=true) does. Forward then runs without them, and
//    backward's first contribution becomes the gradient without a copy.
//    Right where activations dominate the step: the forward peak holds
//    every saved activation, and the gradients would sit on top of it.
//  * kept (L3-L5): every gradient is zeroed in place, and one that does not
//    exist yet is allocated zeroed now, before forward; backward adds into
//    it. With activations compressed, the step peaks in backward, where the
//    gradients exist either way, so keeping them costs no peak; allocated
//    once, before the first forward, they stop landing in (and splitting)
//    the free blocks a caching allocator keeps for activation-sized tensors
//    in every backward. docs/levels.md and docs/benchmarks.md measure it.
// Parameters that do not require gradients are left alone. The values
// backward produces are the same either way (0 + g = g). Throws whatever
// the allocation throws (OutOfMemory under a budget) with every gradient
// either ready or untouched.
void reset_gradients(const std::vector<at::Tensor>& params, const LevelConfig& config);

}  // namespace actkit
