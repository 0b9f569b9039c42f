#include "cuda_vmm_backing.h"

#include "cuda_driver.h"

#include <stdexcept>
#include <string>

#include "actkit/core/errors.h"

namespace actkit::detail {
namespace {

std::string driver_error(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  cuda_driver().cuGetErrorName(r, &name);
  cuda_driver().cuGetErrorString(r, &text);
  return std::string(name != nullptr ? name : "unknown CUDA error") + " (" + (text != nullptr ? text : "?") + ")";
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw Error(std::string("CUDA virtual memory: ") + what + ": " + driver_error(r));
}

// The driver API acts on the calling thread's current context, and blocks
// are allocated and freed from whichever thread LibTorch runs on (autograd
// has its own): every call pushes the device's primary context.
class ContextScope {
 public:
  explicit ContextScope(CUcontext context) { check(cuda_driver().cuCtxPushCurrent(context), "cuCtxPushCurrent"); }
  ~ContextScope() {
    CUcontext popped = nullptr;
    cuda_driver().cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
};

}  // namespace

CudaVmmBacking::CudaVmmBacking(int device, uint64_t bytes, uint64_t granule)
    : device_(device), bytes_(bytes), granule_(granule) {
  if (granule == 0 || bytes == 0 || bytes % granule != 0) {
    throw InvalidInput("CUDA virtual memory: the range (" + std::to_string(bytes) +
                       " bytes) must be a non-zero multiple of the granule (" + std::to_string(granule) + ")");
  }
  check(cuda_driver().cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuda_driver().cuDeviceGet(&dev, device), "cuDeviceGet");
  int supported = 0;
  check(cuda_driver().cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
        "cuDeviceGetAttribute");
  if (supported == 0) {
    throw Error("CUDA device " + std::to_string(device) +
                " has no virtual memory management, which the defrag allocator needs");
  }
  prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop_.location.id = dev;
  access_.location = prop_.location;
  access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t minimum = 0;
  check(cuda_driver().cuMemGetAllocationGranularity(&minimum, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  if (minimum == 0 || granule % minimum != 0) {
    throw Error("CUDA virtual memory: the device maps in units of " + std::to_string(minimum) +
                " bytes, which do not divide the allocator's granule of " + std::to_string(granule));
  }
  check(cuda_driver().cuDevicePrimaryCtxRetain(&context_, dev), "cuDevicePrimaryCtxRetain");
  try {
    ContextScope scope(context_);
    check(cuda_driver().cuMemAddressReserve(&base_, bytes_, 0, 0, 0), "cuMemAddressReserve");
  } catch (...) {
    cuda_driver().cuDevicePrimaryCtxRelease(dev);
    throw;
  }
  handles_.assign(bytes_ / granule_, 0);
  mapped_.assign(bytes_ / granule_, false);
}

CudaVmmBacking::~CudaVmmBacking() {
  if (cuda_driver().cuCtxPushCurrent(context_) != CUDA_SUCCESS) return;  // the driver is gone already
  cuda_driver().cuCtxSynchronize();
  for (uint64_t g = 0; g < mapped_.size(); ++g) unmap_granule(g);
  cuda_driver().cuMemAddressFree(base_, bytes_);
  CUcontext popped = nullptr;
  cuda_driver().cuCtxPopCurrent(&popped);
  cuda_driver().cuDevicePrimaryCtxRelease(CUdevice(prop_.location.id));
}

void CudaVmmBacking::commit(uint64_t offset, uint64_t bytes) {
  if (offset % granule_ != 0 || bytes % granule_ != 0 || offset + bytes > bytes_) {
    throw std::logic_error("CUDA virtual memory: commit of a range that is not whole granules inside the reservation");
  }
  ContextScope scope(context_);
  const uint64_t first = offset / granule_, count = bytes / granule_;
  uint64_t done = 0;
  try {
    for (; done < count; ++done) {
      const uint64_t g = first + done;
      if (mapped_[g]) throw std::logic_error("CUDA virtual memory: a granule was committed twice");
      CUmemGenericAllocationHandle handle = 0;
      const CUresult created = cuda_driver().cuMemCreate(&handle, granule_, &prop_, 0);
      if (created == CUDA_ERROR_OUT_OF_MEMORY) {
        throw OutOfMemory("CUDA virtual memory: the device has no free memory for another " +
                          std::to_string(granule_) + "-byte granule (" + std::to_string(committed_) +
                          " bytes mapped by this allocator)");
      }
      check(created, "cuMemCreate");
      const CUresult mapped = cuda_driver().cuMemMap(base_ + CUdeviceptr(g * granule_), granule_, 0, handle, 0);
      if (mapped != CUDA_SUCCESS) {
        cuda_driver().cuMemRelease(handle);
        check(mapped, "cuMemMap");
      }
      handles_[g] = handle;
      mapped_[g] = true;
      committed_ += granule_;
    }
    check(cuda_driver().cuMemSetAccess(base_ + CUdeviceptr(offset), bytes, &access_, 1), "cuMemSetAccess");
  } catch (...) {
    for (uint64_t i = 0; i < done; ++i) unmap_granule(first + i);
    throw;
  }
}

void CudaVmmBacking::decommit(uint64_t offset, uint64_t bytes) {
  if (cuda_driver().cuCtxPushCurrent(context_) != CUDA_SUCCESS) return;
  cuda_driver().cuCtxSynchronize();
  for (uint64_t g = offset / granule_; g < (offset + bytes) / granule_ && g < mapped_.size(); ++g) unmap_granule(g);
  CUcontext popped = nullptr;
  cuda_driver().cuCtxPopCurrent(&popped);
}

void CudaVmmBacking::unmap_granule(uint64_t index) noexcept {
  if (!mapped_[index]) return;
  cuda_driver().cuMemUnmap(base_ + CUdeviceptr(index * granule_), granule_);
  cuda_driver().cuMemRelease(handles_[index]);
  handles_[index] = 0;
  mapped_[index] = false;
  committed_ -= granule_;
}

}  // namespace actkit::detail
