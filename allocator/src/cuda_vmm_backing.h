// CUDA virtual memory as a MemoryBacking: one range of device addresses
// reserved up front (cuMemAddressReserve); committing a range creates a
// physical 2 MiB allocation per granule and maps it there (cuMemCreate,
// cuMemMap, cuMemSetAccess); decommitting unmaps and releases them. Blocks
// of the defrag policy thus sit at fixed addresses while the memory under
// free space goes back to the driver -- what PyTorch's expandable segments
// and GMLake build on, here under ACTkit's own placement policy.
//
// Needs the CUDA driver API only (no LibTorch), so it is compiled on every
// machine with the CUDA Toolkit.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "actkit/allocator/block_allocator.h"

namespace actkit::detail {

class CudaVmmBacking final : public MemoryBacking {
 public:
  // Reserves `bytes` of addresses on `device`, `granule` bytes per physical
  // allocation. Throws Error if the device lacks virtual memory management,
  // if `granule` is not a multiple of the device's allocation granularity,
  // or if the driver refuses the reservation (the message has its error).
  CudaVmmBacking(int device, uint64_t bytes, uint64_t granule);
  // Unmaps and releases everything still committed and frees the range;
  // errors are ignored (the driver may already be shutting down).
  ~CudaVmmBacking() override;
  CudaVmmBacking(const CudaVmmBacking&) = delete;
  CudaVmmBacking& operator=(const CudaVmmBacking&) = delete;

  // Maps fresh physical memory under [offset, offset + bytes) (granule
  // aligned). Throws OutOfMemory when the device has none left, having
  // released what this call created; Error for any other driver failure.
  void commit(uint64_t offset, uint64_t bytes) override;
  // Waits for the device (kernels queued before a block was freed may still
  // use its memory), then unmaps and releases the range's granules.
  void decommit(uint64_t offset, uint64_t bytes) override;

  // Device address of offset 0.
  CUdeviceptr base() const { return base_; }
  uint64_t size() const { return bytes_; }
  // Bytes currently mapped.
  uint64_t committed() const { return committed_; }

 private:
  void unmap_granule(uint64_t index) noexcept;

  int device_;                   // ordinal, for messages
  CUcontext context_ = nullptr;  // the device's primary context, retained
  CUdeviceptr base_ = 0;
  uint64_t bytes_;
  uint64_t granule_;
  uint64_t committed_ = 0;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  std::vector<CUmemGenericAllocationHandle> handles_;  // per granule
  std::vector<bool> mapped_;                           // per granule
};

}  // namespace actkit::detail
