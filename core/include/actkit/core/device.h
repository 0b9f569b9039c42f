// Device facts and synchronization, usable without including CUDA headers.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>

namespace actkit {

// True when this build links the CUDA kernels and a CUDA device is present.
bool cuda_available();

// Blocks until all work queued on `device` has finished; returns at once
// for CPU. Throws InvalidInput for a CUDA device in a CUDA-less build.
void synchronize(at::Device device);

// Host memory outside LibTorch's CPU allocator (so budgets and trackers
// installed there do not count it): page-locked when CUDA is available, so
// device copies run at full speed. Throws std::bad_alloc.
c10::DataPtr allocate_host(size_t bytes);

// Device memory as LibTorch's CUDA allocator sees it.
struct DeviceMemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors now
  int64_t peak_allocated_bytes = 0;  // since the last reset
  int64_t reserved_bytes = 0;        // held from the driver (allocated + cached)
  int64_t peak_reserved_bytes = 0;
};

// Where the calls below get their answers when an allocator other than
// LibTorch's caching allocator serves CUDA (install_cuda_defrag_allocator()
// registers its own); null restores the caching allocator's. The object must
// outlive its use.
struct DeviceMemoryHooks {
  DeviceMemoryStats (*stats)(int device);
  void (*reset_peaks)(int device);
  void (*release_cache)(int device);
};
void set_device_memory_hooks(const DeviceMemoryHooks* hooks);

// Total memory of a CUDA device (the driver's figure, read once per device).
// Throws InvalidInput for a CPU device or a CUDA-less build.
int64_t device_total_bytes(at::Device device);

// Statistics of a CUDA device. Throws InvalidInput for a CPU device or a
// CUDA-less build.
DeviceMemoryStats device_memory_stats(at::Device device);
// Starts new peaks at the current levels. Same errors.
void reset_device_peaks(at::Device device);
// Returns the caching allocator's unused blocks to the driver. Same errors.
void release_device_cache(at::Device device);

}  // namespace actkit
