// The CUDA side of the dispatch layer: device tables, streams, status
// read-back. Built with real bodies when ACTKIT_WITH_CUDA is defined; the
// CPU-only build gets functions that say CUDA is missing.
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "dispatch.h"

#if defined(ACTKIT_WITH_CUDA)
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/PinnedMemoryAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "actkit/kernels/cuda.h"
#endif

namespace actkit::detail::cuda {

#if defined(ACTKIT_WITH_CUDA)
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(c10::str(what, ": CUDA error: ", cudaGetErrorString(err)));
}

// Device copies of the per-sample tables; kept alive by the caller until
// the kernel is queued (the caching allocator orders reuse on the stream).
struct DeviceTables {
  at::Tensor bits;
  at::Tensor offsets;
};

// The tables go up from page-locked memory without blocking: a copy from
// pageable memory would wait for the stream to drain at every layer.
// LibTorch's pinned-memory allocator keeps the host buffers until their
// copies have run.
DeviceTables upload_tables(at::Device device, kernels::PerGroupLayout& L) {
  DeviceTables t;
  if (L.uniform_bits != 0) return t;
  const int64_t n = L.num_samples;
  const auto pinned = at::TensorOptions().pinned_memory(true);
  t.bits = at::empty({n}, pinned.dtype(at::kByte));
  t.offsets = at::empty({n}, pinned.dtype(at::kLong));
  std::memcpy(t.bits.data_ptr<uint8_t>(), L.sample_bits, size_t(n));
  std::memcpy(t.offsets.data_ptr<int64_t>(), L.sample_bit_offset, size_t(n) * sizeof(int64_t));
  t.bits = t.bits.to(device, /*non_blocking=*/true);
  t.offsets = t.offsets.to(device, /*non_blocking=*/true);
  L.sample_bits = t.bits.data_ptr<uint8_t>();
  L.sample_bit_offset = t.offsets.data_ptr<int64_t>();
  return t;
}

at::Tensor new_status(at::Device device) {
  return at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
}

kernels::EncodeStatus read_status(const at::Tensor& status, bool wait) {
  return wait ? kernels::EncodeStatus(status.item<int32_t>()) : kernels::EncodeStatus::kOk;
}

}  // namespace

bool available() { return true; }

kernels::EncodeStatus pergroup_encode(at::Device device, kernels::PerGroupEncodeArgs args, bool wait_status) {
  c10::cuda::CUDAGuard guard(device);
  const DeviceTables tables = upload_tables(device, args.layout);
  const at::Tensor status = new_status(device);
  check(kernels::pergroup_encode_cuda(args, status.data_ptr<int32_t>(), at::cuda::getCurrentCUDAStream()),
        "encode_per_group");
  return read_status(status, wait_status);
}

void pergroup_decode(at::Device device, kernels::PerGroupDecodeArgs args) {
  c10::cuda::CUDAGuard guard(device);
  const DeviceTables tables = upload_tables(device, args.layout);
  check(kernels::pergroup_decode_cuda(args, at::cuda::getCurrentCUDAStream()), "decode");
}

kernels::EncodeStatus bitfield_encode(at::Device device, const void* values, kernels::IntType type, int64_t count,
                                      int bits, uint8_t* out, bool wait_status) {
  c10::cuda::CUDAGuard guard(device);
  const at::Tensor status = new_status(device);
  check(kernels::bitfield_encode_cuda(values, type, count, bits, out, status.data_ptr<int32_t>(),
                                      at::cuda::getCurrentCUDAStream()),
        "encode_index");
  return read_status(status, wait_status);
}

void bitfield_encode_positive(at::Device device, const void* values, kernels::FloatType type, int64_t count,
                              uint8_t* out) {
  c10::cuda::CUDAGuard guard(device);
  check(kernels::bitfield_encode_positive_cuda(values, type, count, out, at::cuda::getCurrentCUDAStream()),
        "encode_positive_mask");
}

void bitfield_decode(at::Device device, const uint8_t* in, int64_t count, int bits, void* out,
                     kernels::IntType type) {
  c10::cuda::CUDAGuard guard(device);
  check(kernels::bitfield_decode_cuda(in, count, bits, out, type, at::cuda::getCurrentCUDAStream()), "decode");
}

kernels::EncodeStatus directq_encode(at::Device device, const kernels::DirectQEncodeArgs& args) {
  c10::cuda::CUDAGuard guard(device);
  const at::Tensor status = new_status(device);
  check(kernels::directq_encode_cuda(args, status.data_ptr<int32_t>(), at::cuda::getCurrentCUDAStream()),
        "encode_directq");
  return read_status(status, /*wait=*/true);
}

void directq_decode(at::Device device, const kernels::DirectQDecodeArgs& args) {
  c10::cuda::CUDAGuard guard(device);
  check(kernels::directq_decode_cuda(args, at::cuda::getCurrentCUDAStream()), "decode");
}

kernels::EncodeStatus tah_encode(at::Device device, const kernels::TahEncodeArgs& args) {
  c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const kernels::TahLayout& L = args.layout;
  const auto on_device = at::TensorOptions().device(device);
  const at::Tensor status = new_status(device);
  const at::Tensor entropy = at::empty({L.num_tokens}, on_device.dtype(at::kFloat));
  check(kernels::tah_entropy_cuda(args, entropy.data_ptr<float>(), status.data_ptr<int32_t>(), stream),
        "encode_tah");
  // The CPU kernel's order: entropy descending, ties to the lower token
  // index, which a stable descending sort keeps.
  at::Tensor high = at::zeros({L.num_tokens}, on_device.dtype(at::kByte));
  if (L.high_tokens == L.num_tokens) {
    high.fill_(1);
  } else if (L.high_tokens > 0) {
    const at::Tensor order = std::get<1>(at::sort(entropy, /*stable=*/true, /*dim=*/0, /*descending=*/true));
    high.index_fill_(0, order.narrow(0, 0, L.high_tokens), 1);
  }
  check(kernels::tah_pack_map_cuda(high.data_ptr<uint8_t>(), L, args.payload, stream), "encode_tah");
  const at::Tensor ranks = at::empty({L.map_words() + 1}, on_device.dtype(at::kLong));
  check(kernels::tah_word_ranks_cuda(args.payload, L, ranks.data_ptr<int64_t>(), stream), "encode_tah");
  check(kernels::tah_encode_tiles_cuda(args, ranks.data_ptr<int64_t>(), status.data_ptr<int32_t>(), stream),
        "encode_tah");
  return read_status(status, /*wait=*/true);
}

void tah_decode(at::Device device, const kernels::TahDecodeArgs& args) {
  c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor ranks = at::empty({args.layout.map_words() + 1}, at::TensorOptions().device(device).dtype(at::kLong));
  check(kernels::tah_word_ranks_cuda(args.payload, args.layout, ranks.data_ptr<int64_t>(), stream), "decode");
  check(kernels::tah_decode_cuda(args, ranks.data_ptr<int64_t>(), stream), "decode");
}

#else  // !ACTKIT_WITH_CUDA

namespace {
[[noreturn]] void missing() { throw InvalidInput("this ACTkit build has no CUDA support (ACTKIT_CUDA=OFF)"); }
}  // namespace

bool available() { return false; }
kernels::EncodeStatus pergroup_encode(at::Device, kernels::PerGroupEncodeArgs, bool) { missing(); }
void pergroup_decode(at::Device, kernels::PerGroupDecodeArgs) { missing(); }
kernels::EncodeStatus bitfield_encode(at::Device, const void*, kernels::IntType, int64_t, int, uint8_t*, bool) {
  missing();
}
void bitfield_encode_positive(at::Device, const void*, kernels::FloatType, int64_t, uint8_t*) { missing(); }
void bitfield_decode(at::Device, const uint8_t*, int64_t, int, void*, kernels::IntType) { missing(); }
kernels::EncodeStatus directq_encode(at::Device, const kernels::DirectQEncodeArgs&) { missing(); }
void directq_decode(at::Device, const kernels::DirectQDecodeArgs&) { missing(); }
kernels::EncodeStatus tah_encode(at::Device, const kernels::TahEncodeArgs&) { missing(); }
void tah_decode(at::Device, const kernels::TahDecodeArgs&) { missing(); }

#endif

}  // namespace actkit::detail::cuda

namespace actkit {

bool cuda_available() {
#if defined(ACTKIT_WITH_CUDA)
  return at::hasCUDA();
#else
  return false;
#endif
}

void synchronize(at::Device device) {
  if (device.is_cpu()) return;
#if defined(ACTKIT_WITH_CUDA)
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) throw Error(c10::str("synchronize: CUDA error: ", cudaGetErrorString(err)));
    return;
  }
#endif
  throw InvalidInput(c10::str("synchronize: unsupported device ", device));
}

}  // namespace actkit

namespace actkit {

c10::DataPtr allocate_host(size_t bytes) {
#if defined(ACTKIT_WITH_CUDA)
  if (cuda_available()) return at::cuda::getPinnedMemoryAllocator()->allocate(bytes);
#endif
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (p == nullptr) throw std::bad_alloc();
  return {p, p, &std::free, c10::Device(c10::DeviceType::CPU)};
}

namespace {
std::atomic<const DeviceMemoryHooks*> g_hooks{nullptr};
}  // namespace

void set_device_memory_hooks(const DeviceMemoryHooks* hooks) { g_hooks.store(hooks); }

#if defined(ACTKIT_WITH_CUDA)
namespace {
int cuda_index(at::Device device) {
  if (!device.is_cuda()) throw InvalidInput(c10::str("device memory statistics: ", device, " is not a CUDA device"));
  // A CUDA LibTorch on a machine without a GPU (or its driver): say so, as a
  // build without CUDA does, instead of LibTorch's driver error.
  if (!cuda_available()) throw InvalidInput(c10::str("device memory of ", device, ": no CUDA device is visible"));
  const int index = device.has_index() ? device.index() : int(c10::cuda::current_device());
  // The caching allocator answers only after CUDA's lazy initialisation,
  // which the first tensor on a CUDA device triggers.
  static std::once_flag initialized;
  std::call_once(initialized, [index] { at::empty({1}, at::TensorOptions().device(at::kCUDA, index)); });
  return index;
}
}  // namespace

DeviceMemoryStats device_memory_stats(at::Device device) {
  const int index = cuda_index(device);
  if (const DeviceMemoryHooks* hooks = g_hooks.load()) return hooks->stats(index);
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  const size_t all = 0;  // StatType::AGGREGATE, first in every LibTorch version
  DeviceMemoryStats out;
  out.allocated_bytes = s.allocated_bytes[all].current;
  out.peak_allocated_bytes = s.allocated_bytes[all].peak;
  out.reserved_bytes = s.reserved_bytes[all].current;
  out.peak_reserved_bytes = s.reserved_bytes[all].peak;
  return out;
}

int64_t device_total_bytes(at::Device device) {
  const int index = cuda_index(device);
  static std::mutex mu;
  static std::map<int, int64_t> totals;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = totals.find(index); it != totals.end()) return it->second;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) throw Error(c10::str("device memory of ", device, ": CUDA error: ", cudaGetErrorString(err)));
  return totals[index] = int64_t(total_bytes);
}

void reset_device_peaks(at::Device device) {
  const int index = cuda_index(device);
  if (const DeviceMemoryHooks* hooks = g_hooks.load()) return hooks->reset_peaks(index);
  c10::cuda::CUDACachingAllocator::resetPeakStats(index);
}

void release_device_cache(at::Device device) {
  const int index = cuda_index(device);
  if (const DeviceMemoryHooks* hooks = g_hooks.load()) return hooks->release_cache(index);
  c10::cuda::CUDACachingAllocator::emptyCache();
}
#else
int64_t device_total_bytes(at::Device device) {
  throw InvalidInput(c10::str("device memory of ", device, ": this build has no CUDA"));
}
DeviceMemoryStats device_memory_stats(at::Device device) {
  throw InvalidInput(c10::str("device memory statistics for ", device, ": this build has no CUDA"));
}
void reset_device_peaks(at::Device device) {
  throw InvalidInput(c10::str("device memory statistics for ", device, ": this build has no CUDA"));
}
void release_device_cache(at::Device device) {
  throw InvalidInput(c10::str("device memory for ", device, ": this build has no CUDA"));
}
#endif

}  // namespace actkit
