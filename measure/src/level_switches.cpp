#include "actkit/measure/level_switches.h"

#include <c10/util/StringUtil.h>

#include "actkit/allocator/cuda_allocator.h"
#include "actkit/core/errors.h"

namespace actkit {

void apply_level_switches(const std::vector<LevelConfig>& levels, at::Device device) {
  if (levels.empty() || !device.is_cuda()) return;
  const bool defrag = levels.front().defrag_allocator;
  for (const LevelConfig& l : levels) {
    if (l.defrag_allocator != defrag) {
      throw InvalidInput(c10::str(levels.front().spec, " and ", l.spec,
                                  " need different CUDA allocators, and one serves the whole process: run the "
                                  "levels with the defrag switch (L5) in a process of their own"));
    }
  }
  if (defrag == cuda_defrag_allocator_installed()) return;
  if (!defrag) {
    throw InvalidInput(c10::str(levels.front().spec,
                                " must not run under the CUDA defrag allocator this process installed: run it in a "
                                "process of its own"));
  }
  install_cuda_defrag_allocator();  // throws Error if the device was touched already
}

std::string level_allocator(const LevelConfig& level, at::Device device, const std::string& cpu_caching_policy) {
  if (device.is_cuda()) return level.defrag_allocator ? "cuda defrag" : "cuda caching";
  return level.defrag_allocator ? "defrag" : cpu_caching_policy;
}

}  // namespace actkit
