// Installing an allocator as LibTorch's CPU allocator for a scope.
#pragma once

#include <c10/core/Allocator.h>

namespace actkit {

// Installs `allocator` as LibTorch's CPU allocator for its lifetime and
// restores the previous one after. Not reentrant across threads: one
// measurement at a time per process. Blocks keep their own deleter, so they
// may be freed after the scope ends.
class ScopedCpuAllocator {
 public:
  explicit ScopedCpuAllocator(c10::Allocator* allocator);
  ~ScopedCpuAllocator();
  ScopedCpuAllocator(const ScopedCpuAllocator&) = delete;
  ScopedCpuAllocator& operator=(const ScopedCpuAllocator&) = delete;

 private:
  c10::Allocator* previous_;
};

}  // namespace actkit
