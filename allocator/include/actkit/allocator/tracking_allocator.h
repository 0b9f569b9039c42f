// Counts the bytes LibTorch holds through the CPU allocator: current, peak,
// and allocation count. Memory reports (actkit memory, actkit train) read
// it; ActNN measured activation memory the same way on the GPU.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "actkit/allocator/allocation_trace.h"

#include "actkit/allocator/scoped_cpu_allocator.h"

namespace actkit {

class TrackingAllocator final : public c10::Allocator {
 public:
  // The process-wide tracker of CPU memory. It is never destroyed: blocks it
  // hands out may be freed at any time, even after it is uninstalled.
  static TrackingAllocator& cpu();

  // Both constness variants: LibTorch 1.13 declares allocate() const, 2.x
  // does not; whichever the base declares is the override.
  c10::DataPtr allocate(size_t bytes) const;
  c10::DataPtr allocate(size_t bytes);
  // Pure virtual in LibTorch 2.x, absent in 1.13.
  void copy_data(void* dest, const void* src, std::size_t count) const;
  // Blocks carry their size in a header, so the context is the data pointer
  // and the raw interface works (oneDNN allocates through it).
  c10::DeleterFnPtr raw_deleter() const override { return &TrackingAllocator::release; }

  int64_t current_bytes() const { return current_.load(std::memory_order_relaxed); }
  int64_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  int64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }
  // Starts a new peak from the current level.
  void reset_peak() { peak_.store(current_bytes(), std::memory_order_relaxed); }

  // Starts recording every allocation and free into a trace (see
  // allocation_trace.h); a recording already running is discarded.
  void start_recording();
  // Stops and returns the recording, named `name`.
  AllocationTrace stop_recording(const std::string& name);

 private:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}
  static void release(void* data);

  c10::Allocator* base_;
  mutable std::atomic<int64_t> current_{0};
  mutable std::atomic<int64_t> peak_{0};
  mutable std::atomic<int64_t> allocations_{0};
  mutable std::atomic<bool> recording_{false};
  mutable std::mutex trace_mu_;
  mutable std::vector<TraceEvent> trace_;
};

// Installs TrackingAllocator::cpu() as LibTorch's CPU allocator for its
// lifetime and restores the previous one after. Not reentrant across
// threads: create one per process-wide measurement.
class ScopedCpuTracking {
 public:
  ScopedCpuTracking() : scope_(&TrackingAllocator::cpu()) {}
  TrackingAllocator& tracker() const { return TrackingAllocator::cpu(); }

 private:
  ScopedCpuAllocator scope_;
};

}  // namespace actkit
