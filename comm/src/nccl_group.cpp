// The only file that includes ProcessGroupNCCL.hpp; built where LibTorch has
// CUDA and c10d's NCCL group (ACTKIT_WITH_NCCL), else make_nccl_group refuses.
#include <c10/util/StringUtil.h>

#include <cstdlib>
#include <string>

#include "actkit/core/errors.h"
#include "process_group.h"

#ifdef ACTKIT_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace actkit::detail {

BackendGroup make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             const GroupConfig& config) {
#ifdef ACTKIT_WITH_NCCL
  const int gpus = int(c10::cuda::device_count());
  if (gpus < 1) throw InvalidInput(c10::str("rank ", rank, ": backend nccl needs a GPU and none is visible"));
  int index = rank % gpus;
  if (const char* local = std::getenv("LOCAL_RANK"); local != nullptr && *local != '\0') {
    index = std::atoi(local);
    if (index < 0 || index >= gpus) {
      throw InvalidInput(c10::str("rank ", rank, ": LOCAL_RANK=", local, " but ", gpus, " GPU(s) are visible"));
    }
  }
  // NCCL's communicators bind to the current device when they are made.
  c10::cuda::set_device(c10::DeviceIndex(index));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = config.timeout;
  c10::intrusive_ptr<CollectiveGroup> group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return {group, c10::Device(c10::kCUDA, c10::DeviceIndex(index))};
#else
  (void)store;
  (void)size;
  (void)config;
  throw InvalidInput(c10::str("rank ", rank, ": backend nccl: this ACTkit was built against a LibTorch without ",
                              "CUDA or without c10d's NCCL group; use gloo"));
#endif
}

}  // namespace actkit::detail
