// L5 on a GPU: the defrag placement policy (block_allocator.h) over CUDA
// virtual memory, installed as LibTorch's CUDA allocator through its
// pluggable-allocator interface -- no forked PyTorch. Each device gets one
// reserved address range; 2 MiB granules are mapped under live blocks and
// unmapped (after the device has finished with them) when an allocation
// needs the room, so free space between blocks costs no device memory.
//
// Blocks are reused in the order LibTorch frees them on the allocating
// stream, as with cudaMallocAsync on one stream; work on other streams must
// be synchronised by the caller before a tensor it uses is freed.
#pragma once

#include <cstdint>

#include "actkit/allocator/block_allocator.h"

namespace actkit {

// True when this build can install the CUDA defrag allocator (LibTorch with
// CUDA, built with ACTKIT_CUDA_ALLOCATOR). Says nothing about a device.
bool cuda_defrag_allocator_supported();

// Makes the defrag allocator LibTorch's CUDA allocator for every device for
// the rest of the process. `limit`: bytes each device may have mapped; -1
// takes the device's total memory less 512 MiB (its context and the CUDA
// libraries' own allocations). Must run before the first CUDA allocation
// (LibTorch cannot swap an allocator in use); calling it again with the same
// limit does nothing. Allocations past the limit, or past what the device
// still has, throw c10::OutOfMemoryError, as LibTorch's own allocator does.
// Throws InvalidInput in a build without it or for a different limit than
// an earlier call's, Error if LibTorch's CUDA allocator is already in use.
void install_cuda_defrag_allocator(int64_t limit = -1);

// Whether install_cuda_defrag_allocator() has run in this process.
bool cuda_defrag_allocator_installed();

// Statistics of the installed allocator on `device` (zeros for a device it
// has not served yet); their fragmentation() is the allocator's.
// Throws InvalidInput if it is not installed.
BlockStats cuda_defrag_allocator_stats(int device);

}  // namespace actkit
