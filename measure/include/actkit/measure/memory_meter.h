// Bytes held by tensors on one device, for the drivers that measure memory
// (`actkit memory`, `actkit train`): LibTorch's CPU allocator wrapped in the
// tracking allocator for the meter's lifetime on the CPU, the CUDA
// allocator's statistics on CUDA.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/measure/node_profile.h"

namespace actkit {

class MemoryMeter {
 public:
  // Installs the CPU tracking allocator (on every device: host tensors of
  // a CUDA run are then counted apart from the device's). Throws
  // InvalidInput for a CUDA device in a build or machine without CUDA.
  explicit MemoryMeter(at::Device device);
  // Bytes held now (on CUDA after the device has finished its queued work).
  int64_t current() const;
  // Most bytes held since the last reset_peak().
  int64_t peak() const;
  void reset_peak();
  // The three calls above, for BackwardProfile; valid while the meter is.
  MemoryProbe probe();

 private:
  at::Device device_;
  ScopedCpuTracking tracking_;
};

}  // namespace actkit
