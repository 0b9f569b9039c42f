// The statistic fine-grained mixed precision allocates bits from (ActNN
// App. B): for a tensor seen as samples along its first dimension, each
// sample's sum over its quantization groups of the squared group range,
// ||R_n||^2. A sample's gradient variance at B levels is proportional to
// G/6 * ||R_n||^2 / B^2. The C++ controller and the Python front's L3 both
// read it from here.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace actkit {

// ||R_n||^2 of each of x.size(0) samples of x (rank >= 1, float type),
// groups of `group_size` values within each sample, the last group of a
// sample possibly shorter. A sample with a NaN or infinite range gets 0 (no
// say in the allocation). A device synchronisation on CUDA (the result is
// on the host). Throws InvalidInput for rank 0 or group_size < 1.
std::vector<double> sample_range_sq(const at::Tensor& x, int64_t group_size);

}  // namespace actkit
