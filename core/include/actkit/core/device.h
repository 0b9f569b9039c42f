// Device facts and synchronization, usable without including CUDA headers.
#pragma once

#include <c10/core/Device.h>

namespace actkit {

// True when this build links the CUDA kernels and a CUDA device is present.
bool cuda_available();

// Blocks until all work queued on `device` has finished; returns at once
// for CPU. Throws InvalidInput for a CUDA device in a CUDA-less build.
void synchronize(at::Device device);

}  // namespace actkit
