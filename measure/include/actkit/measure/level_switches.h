// The process-wide switches a level implies, acted on in one place for
// train, memory and maxbatch alike. Today that is the defragmenting
// allocator (L5):
//   on CUDA  it becomes LibTorch's CUDA allocator for the whole process, so
//            it is installed before anything touches the device, and levels
//            with and without it cannot share a process;
//   on CPU   it is the placement policy of a budgeted allocator (maxbatch's
//            simulated device); a run without a budget keeps LibTorch's.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "actkit/core/level.h"

namespace actkit {

// Applies the switches of a run of `levels` (in one process) on `device`:
// on CUDA, installs the defrag allocator when they have the defrag switch.
// Throws InvalidInput when the levels disagree on it on CUDA, or when the
// process already runs under the other CUDA allocator (naming the levels
// and what to do instead); Error if LibTorch's CUDA allocator is in use.
void apply_level_switches(const std::vector<LevelConfig>& levels, at::Device device);

// The allocator a run of `level` on `device` uses, by name: "cuda defrag" or
// "cuda caching" on CUDA; on the CPU with a budget, the budget's block
// policy: "defrag" for the defrag switch, else `cpu_caching_policy`.
std::string level_allocator(const LevelConfig& level, at::Device device, const std::string& cpu_caching_policy);

}  // namespace actkit
