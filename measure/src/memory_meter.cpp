#include "actkit/measure/memory_meter.h"

#include "actkit/core/device.h"
#include "actkit/core/errors.h"

namespace actkit {

MemoryMeter::MemoryMeter(at::Device device) : device_(device) {
  if (device_.is_cuda() && !cuda_available()) throw InvalidInput("memory meter: no CUDA device here");
}

int64_t MemoryMeter::current() const {
  if (device_.is_cpu()) return tracking_.tracker().current_bytes();
  synchronize(device_);
  return device_memory_stats(device_).allocated_bytes;
}

int64_t MemoryMeter::peak() const {
  return device_.is_cpu() ? tracking_.tracker().peak_bytes() : device_memory_stats(device_).peak_allocated_bytes;
}

void MemoryMeter::reset_peak() {
  if (device_.is_cpu()) {
    tracking_.tracker().reset_peak();
  } else {
    reset_device_peaks(device_);
  }
}

MemoryProbe MemoryMeter::probe() {
  return {[this] { return current(); }, [this] { return peak(); }, [this] { reset_peak(); }};
}

}  // namespace actkit
