#include "actkit/measure/run_device.h"

#include <c10/util/Exception.h>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"

namespace actkit {

at::Device parse_run_device(const std::string& text, const char* what) {
  at::Device device = at::kCPU;
  try {
    device = at::Device(text);
  } catch (const c10::Error&) {
    throw InvalidInput(std::string(what) + ": unknown device '" + text + "' (cpu or cuda[:N])");
  }
  if (!device.is_cpu() && !device.is_cuda()) throw InvalidInput(std::string(what) + ": the device must be cpu or cuda[:N]");
  if (device.is_cuda() && !cuda_available()) {
    throw InvalidInput(std::string(what) + ": no CUDA device here, or this build has no CUDA");
  }
  return device;
}

}  // namespace actkit
