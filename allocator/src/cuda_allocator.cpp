// The CUDA defrag allocator's installation into LibTorch (see
// cuda_allocator.h). Real bodies when the build has LibTorch's CUDA and
// ACTKIT_CUDA_ALLOCATOR; otherwise the functions say it is missing.
#include "actkit/allocator/cuda_allocator.h"

#include <c10/util/StringUtil.h>

#include <mutex>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"

#if defined(ACTKIT_WITH_CUDA) && defined(ACTKIT_CUDA_ALLOCATOR)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "block_allocator_impl.h"
#include "cuda_vmm_backing.h"
#endif

namespace actkit {

#if defined(ACTKIT_WITH_CUDA) && defined(ACTKIT_CUDA_ALLOCATOR)
namespace {

constexpr int64_t kDeviceHeadroom = int64_t(512) << 20;

// One policy and one address range per device, created on the device's
// first allocation.
class CudaDefrag {
 public:
  explicit CudaDefrag(int64_t limit) : limit_(limit) {}
  int64_t limit() const { return limit_; }

  // LibTorch's malloc: throws c10::OutOfMemoryError past the limit or the
  // device's memory, so LibTorch's own fallbacks and callers' handlers work.
  void* allocate(size_t bytes, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    Device& d = device_of(device);
    uint64_t offset = 0;
    try {
      offset = d.blocks->allocate(bytes);
    } catch (const OutOfMemory& e) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory on device ", device,
                       " (ACTkit defrag allocator): ", e.what());
    }
#ifndef NDEBUG
    d.blocks->check_invariants();
#endif
    return reinterpret_cast<void*>(d.backing->base() + offset);
  }

  void free(void* p, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    Device& d = device_of(device);
    d.blocks->free(uint64_t(reinterpret_cast<uintptr_t>(p) - d.backing->base()));
#ifndef NDEBUG
    d.blocks->check_invariants();
#endif
  }

  // emptyCache(): every device's retained granules go back to the driver.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& d : devices_) {
      if (d) d->blocks->release_cached();
    }
  }

  BlockStats stats(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    return device < int(devices_.size()) && devices_[size_t(device)] ? devices_[size_t(device)]->blocks->stats()
                                                                     : BlockStats{};
  }

  void reset_peaks(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device < int(devices_.size()) && devices_[size_t(device)]) devices_[size_t(device)]->blocks->reset_peaks();
  }

 private:
  struct Device {
    std::unique_ptr<detail::CudaVmmBacking> backing;
    std::unique_ptr<BlockAllocator> blocks;  // commits through `backing`
  };

  Device& device_of(int device) {
    if (device < 0) throw InvalidInput(c10::str("CUDA defrag allocator: bad device index ", device));
    if (size_t(device) >= devices_.size()) devices_.resize(size_t(device) + 1);
    auto& slot = devices_[size_t(device)];
    if (!slot) {
      int64_t limit = limit_;
      if (limit < 0) {
        c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
        size_t free_bytes = 0, total_bytes = 0;
        C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        limit = std::max<int64_t>(int64_t(total_bytes) - kDeviceHeadroom, int64_t(detail::kGranule));
      }
      const uint64_t space = detail::default_address_space(limit, 0);
      auto d = std::make_unique<Device>();
      d->backing = std::make_unique<detail::CudaVmmBacking>(device, space, detail::kGranule);
      // Emptied granules stay mapped until an allocation needs the room:
      // the next step reuses them without mapping again.
      d->blocks = make_defrag_allocator(limit, d->backing.get(), space, /*retain_freed=*/true);
      slot = std::move(d);
    }
    return *slot;
  }

  int64_t limit_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Device>> devices_;
};

// Never destroyed: LibTorch frees blocks during process exit, after static
// destructors would have run.
CudaDefrag* g_defrag = nullptr;
std::mutex g_install_mu;

DeviceMemoryStats hook_stats(int device) {
  const BlockStats s = g_defrag->stats(device);
  DeviceMemoryStats out;
  out.allocated_bytes = s.allocated;
  out.peak_allocated_bytes = s.peak_allocated;
  out.reserved_bytes = s.reserved;
  out.peak_reserved_bytes = s.peak_reserved;
  return out;
}
void hook_reset_peaks(int device) { g_defrag->reset_peaks(device); }
void hook_release_cache(int) { g_defrag->release_cached(); }
const DeviceMemoryHooks kHooks{&hook_stats, &hook_reset_peaks, &hook_release_cache};

}  // namespace

bool cuda_defrag_allocator_supported() { return true; }

void install_cuda_defrag_allocator(int64_t limit) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (limit < -1 || (limit >= 0 && limit < int64_t(detail::kGranule))) {
    throw InvalidInput(c10::str("install_cuda_defrag_allocator: the limit must be -1 or at least 2 MiB, got ", limit));
  }
  if (g_defrag != nullptr) {
    if (g_defrag->limit() == limit) return;
    throw InvalidInput(c10::str("install_cuda_defrag_allocator: already installed with limit ", g_defrag->limit(),
                                ", asked for ", limit));
  }
  auto* state = new CudaDefrag(limit);
  // The device argument's type differs between LibTorch versions (int,
  // c10::DeviceIndex): generic lambdas fit either std::function.
  auto alloc_fn = [state](size_t bytes, auto device, cudaStream_t) -> void* { return state->allocate(bytes, int(device)); };
  auto free_fn = [state](void* p, size_t, auto device, cudaStream_t) { state->free(p, int(device)); };
  try {
    auto allocator = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(alloc_fn, free_fn);
    if (auto* pluggable = dynamic_cast<torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator*>(allocator.get())) {
      pluggable->set_reset_fn([state] { state->release_cached(); });
    }
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
  } catch (const c10::Error& e) {
    delete state;
    throw Error(c10::str("install_cuda_defrag_allocator: LibTorch refused (it must run before the first CUDA "
                         "tensor): ",
                         e.what_without_backtrace()));
  }
  g_defrag = state;
  set_device_memory_hooks(&kHooks);
}

bool cuda_defrag_allocator_installed() {
  std::lock_guard<std::mutex> lock(g_install_mu);
  return g_defrag != nullptr;
}

BlockStats cuda_defrag_allocator_stats(int device) {
  CudaDefrag* state = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_install_mu);
    state = g_defrag;
  }
  if (state == nullptr) throw InvalidInput("cuda_defrag_allocator_stats: the CUDA defrag allocator is not installed");
  return state->stats(device);
}

#else  // no CUDA allocator in this build

namespace {
[[noreturn]] void missing(const char* what) {
  throw InvalidInput(c10::str(what, ": this ACTkit build has no CUDA defrag allocator (it needs LibTorch with CUDA "
                              "and ACTKIT_CUDA_ALLOCATOR=ON)"));
}
}  // namespace

bool cuda_defrag_allocator_supported() { return false; }
void install_cuda_defrag_allocator(int64_t) { missing("install_cuda_defrag_allocator"); }
bool cuda_defrag_allocator_installed() { return false; }
BlockStats cuda_defrag_allocator_stats(int) { missing("cuda_defrag_allocator_stats"); }

#endif

}  // namespace actkit
