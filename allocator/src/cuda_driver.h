// The CUDA driver API entry points the CUDA virtual-memory backing uses,
// loaded from libcuda.so.1 when first needed instead of linked.
//
// Why not linked: libcuda.so.1 comes with the GPU driver, not with the CUDA
// toolkit or PyTorch's wheel. A libactkit linked against it would not even
// load on a machine without a GPU driver, and the wheel world (LibTorch 2.x
// with CUDA) is built and tested on such machines (scripts/test.sh). LibTorch
// resolves its own driver calls the same way.
#pragma once

#include <cuda.h>

namespace actkit::detail {

// Every driver function used, by its cuda.h name. cuda.h maps some names to
// versioned symbols (cuCtxPushCurrent -> cuCtxPushCurrent_v2); the loader
// looks up the mapped name, so each pointer has the ABI its prototype says.
#define ACTKIT_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                             \
  X(cuGetErrorName)                     \
  X(cuGetErrorString)                   \
  X(cuDeviceGet)                        \
  X(cuDeviceGetAttribute)               \
  X(cuDevicePrimaryCtxRetain)           \
  X(cuDevicePrimaryCtxRelease)          \
  X(cuCtxPushCurrent)                   \
  X(cuCtxPopCurrent)                    \
  X(cuCtxSynchronize)                   \
  X(cuMemGetAllocationGranularity)      \
  X(cuMemAddressReserve)                \
  X(cuMemAddressFree)                   \
  X(cuMemCreate)                        \
  X(cuMemRelease)                       \
  X(cuMemMap)                           \
  X(cuMemUnmap)                         \
  X(cuMemSetAccess)

struct CudaDriver {
#define ACTKIT_CUDA_DRIVER_POINTER(name) decltype(&::name) name = nullptr;
  ACTKIT_CUDA_DRIVER_FUNCTIONS(ACTKIT_CUDA_DRIVER_POINTER)
#undef ACTKIT_CUDA_DRIVER_POINTER
};

// The driver, loaded once (thread-safe) and kept for the process. Throws
// actkit::Error naming the library or the symbol when the driver is not
// installed or lacks a function (a driver older than CUDA 10.2).
const CudaDriver& cuda_driver();

}  // namespace actkit::detail
