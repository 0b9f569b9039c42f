#include "actkit/allocator/scoped_cpu_allocator.h"

#include <c10/core/CPUAllocator.h>

namespace actkit {
namespace {
// Highest priority: LibTorch's own registrations never displace it.
constexpr uint8_t kPriority = 255;
}  // namespace

ScopedCpuAllocator::ScopedCpuAllocator(c10::Allocator* allocator) : previous_(c10::GetCPUAllocator()) {
  c10::SetCPUAllocator(allocator, kPriority);
}

ScopedCpuAllocator::~ScopedCpuAllocator() { c10::SetCPUAllocator(previous_, kPriority); }

}  // namespace actkit
