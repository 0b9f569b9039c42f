// Memory from Python: the CPU tracking allocator behind actkit.memory.track()
// and the CUDA defragmenting allocator (L5, allocator/cuda_allocator.h) as
// torch operators.
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "actkit/allocator/cuda_allocator.h"
#include "actkit/allocator/tracking_allocator.h"
#include "common.h"

namespace {

using actkit::python::translated;

// The CPU tracking allocator (allocator/tracking_allocator.h), installed
// while a Python `actkit.memory.track()` block runs: LibTorch's CPU
// allocations go through it and are counted.
std::unique_ptr<actkit::ScopedCpuTracking>& tracking() {
  static std::unique_ptr<actkit::ScopedCpuTracking> scope;
  return scope;
}

// Starts (on) or stops counting CPU allocations; starting resets the peak
// to the bytes held now. Starting twice is an error (one measurement at a time).
void memory_track(bool on) {
  auto& scope = tracking();
  if (on) {
    TORCH_CHECK(!scope, "actkit.memory.track: a measurement is already running in this process");
    scope = std::make_unique<actkit::ScopedCpuTracking>();
    scope->tracker().reset_peak();
  } else {
    scope.reset();
  }
}

// Bytes held now, and the most held since tracking started, by the blocks
// the tracking allocator handed out (those allocated before it was
// installed are not counted).
std::vector<int64_t> memory_bytes() {
  const actkit::TrackingAllocator& t = actkit::TrackingAllocator::cpu();
  return {t.current_bytes(), t.peak_bytes()};
}

// Whether this build has the CUDA defrag allocator (a CUDA torch, built
// with it); says nothing about a device.
bool defrag_supported() { return actkit::cuda_defrag_allocator_supported(); }

// Makes the defrag allocator torch's CUDA allocator for the rest of the
// process (`limit`: bytes per device, -1 = the device's memory less 512
// MiB). Must run before the first CUDA tensor. Throws (RuntimeError) in a
// build without it, after CUDA memory was allocated, or for a limit other
// than an earlier call's.
void defrag_install(int64_t limit) {
  translated([&] { actkit::install_cuda_defrag_allocator(limit); });
}

bool defrag_installed() { return actkit::cuda_defrag_allocator_installed(); }

// [allocated, peak allocated, reserved, peak reserved, allocations, refused]
// bytes and counts of the installed defrag allocator on `device`.
std::vector<int64_t> defrag_stats(int64_t device) {
  return translated([&] {
    const actkit::BlockStats s = actkit::cuda_defrag_allocator_stats(int(device));
    return std::vector<int64_t>{s.allocated, s.peak_allocated, s.reserved, s.peak_reserved, s.allocations,
                                s.out_of_memory};
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(actkit, m) {
  m.def("memory_track(bool on) -> ()", &memory_track);
  m.def("memory_bytes() -> int[]", &memory_bytes);
  m.def("defrag_supported() -> bool", &defrag_supported);
  m.def("defrag_install(int limit) -> ()", &defrag_install);
  m.def("defrag_installed() -> bool", &defrag_installed);
  m.def("defrag_stats(int device) -> int[]", &defrag_stats);
}
