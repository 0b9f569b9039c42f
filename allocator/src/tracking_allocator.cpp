#include "actkit/allocator/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <cstring>

namespace actkit {
namespace {

// In front of every block; 64 bytes keep LibTorch's 64-byte data alignment.
struct alignas(64) Header {
  size_t bytes;
  const TrackingAllocator* owner;
  uint64_t id;  // allocation number, names the block in traces
};
static_assert(sizeof(Header) == 64, "the header must preserve alignment");

}  // namespace

TrackingAllocator& TrackingAllocator::cpu() {
  // Leaked on purpose: blocks may be released during static destruction.
  static TrackingAllocator* instance = new TrackingAllocator(c10::GetDefaultCPUAllocator());
  return *instance;
}

c10::DataPtr TrackingAllocator::allocate(size_t bytes) const {
  auto* header = static_cast<Header*>(base_->raw_allocate(bytes + sizeof(Header)));
  header->bytes = bytes;
  header->owner = this;
  header->id = uint64_t(allocations_.fetch_add(1, std::memory_order_relaxed));
  void* data = header + 1;
  if (recording_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(trace_mu_);
    trace_.push_back({header->id, int64_t(bytes)});
  }
  const int64_t now = current_.fetch_add(int64_t(bytes), std::memory_order_relaxed) + int64_t(bytes);
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return {data, data, &TrackingAllocator::release, c10::Device(c10::DeviceType::CPU)};
}

c10::DataPtr TrackingAllocator::allocate(size_t bytes) {
  return static_cast<const TrackingAllocator*>(this)->allocate(bytes);
}

void TrackingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count != 0) std::memcpy(dest, src, count);
}

void TrackingAllocator::start_recording() {
  std::lock_guard<std::mutex> lock(trace_mu_);
  trace_.clear();
  recording_.store(true);
}

AllocationTrace TrackingAllocator::stop_recording(const std::string& name) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  recording_.store(false);
  AllocationTrace t;
  t.name = name;
  t.events = std::move(trace_);
  trace_.clear();
  return t;
}

void TrackingAllocator::release(void* data) {
  if (data == nullptr) return;
  Header* header = static_cast<Header*>(data) - 1;
  const TrackingAllocator* owner = header->owner;
  owner->current_.fetch_sub(int64_t(header->bytes), std::memory_order_relaxed);
  if (owner->recording_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(owner->trace_mu_);
    owner->trace_.push_back({header->id, -1});
  }
  owner->base_->raw_deallocate(header);
}

}  // namespace actkit
