#include "actkit/core/transfer_queue.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <map>
#include <mutex>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"

#if defined(ACTKIT_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace actkit {

void detail::check_transfer(const at::Tensor& dst, const at::Tensor& src, const char* what) {
  if (!dst.defined() || !src.defined()) throw InvalidInput(c10::str(what, ": undefined tensor"));
  if (!dst.is_contiguous() || !src.is_contiguous()) throw InvalidInput(c10::str(what, ": tensors must be contiguous"));
  if (dst.scalar_type() != src.scalar_type()) {
    throw InvalidInput(c10::str(what, ": ", src.scalar_type(), " into ", dst.scalar_type()));
  }
  if (dst.nbytes() != src.nbytes()) {
    throw InvalidInput(c10::str(what, ": ", src.nbytes(), " bytes into ", dst.nbytes()));
  }
  if (!dst.is_cpu() && !src.is_cpu()) {
    throw InvalidInput(c10::str(what, ": one side must be host memory (", src.device(), " -> ", dst.device(), ")"));
  }
}

namespace {

class FinishedTransfer final : public Transfer {
 public:
  explicit FinishedTransfer(at::Tensor dst) : dst_(std::move(dst)) {}
  bool done() override { return true; }
  void wait() override {}
  void order_before_current_stream() override {}
  const at::Tensor& destination() const override { return dst_; }

 private:
  at::Tensor dst_;
};

class ImmediateQueue final : public TransferQueue {
 public:
  bool asynchronous(at::Device) const override { return false; }
  std::unique_ptr<Transfer> start(at::Tensor dst, at::Tensor src) override {
    detail::check_transfer(dst, src, "transfer");
    return detail::copy_now(std::move(dst), std::move(src));
  }
};

#if defined(ACTKIT_WITH_CUDA)

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(c10::str("transfer: ", what, ": CUDA error: ", cudaGetErrorString(err)));
}

// Raw CUDA events (not LibTorch's wrapper, whose namespace moved between
// LibTorch versions); timing off, as only ordering is wanted.
cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

class CudaTransfer final : public Transfer {
 public:
  CudaTransfer(at::Tensor dst, at::Tensor src, c10::DeviceIndex device)
      : dst_(std::move(dst)), src_(std::move(src)), device_(device), finished_(new_event()) {}

  ~CudaTransfer() override {
    // Waits, so the memory the copy touches outlives it (see the header).
    cudaEventSynchronize(finished_);
    cudaEventDestroy(finished_);
  }

  bool done() override {
    const cudaError_t err = cudaEventQuery(finished_);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();  // a query that says "not yet" is not an error
      return false;
    }
    check(err, "cudaEventQuery");
    return true;
  }

  void wait() override { check(cudaEventSynchronize(finished_), "cudaEventSynchronize"); }

  void order_before_current_stream() override {
    c10::cuda::CUDAGuard guard(device_);
    check(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), finished_, 0), "cudaStreamWaitEvent");
  }

  const at::Tensor& destination() const override { return dst_; }

  // Queues the copy on `copies` behind what `compute` has queued so far.
  void launch(const c10::cuda::CUDAStream& compute, const c10::cuda::CUDAStream& copies) {
    cudaEvent_t queued = new_event();
    cudaError_t err = cudaEventRecord(queued, compute.stream());
    if (err == cudaSuccess) err = cudaStreamWaitEvent(copies.stream(), queued, 0);
    cudaEventDestroy(queued);  // released once recorded work completes
    check(err, "ordering behind the compute stream");
    {
      c10::cuda::CUDAStreamGuard on_copies(copies);
      dst_.copy_(src_, /*non_blocking=*/true);
    }
    check(cudaEventRecord(finished_, copies.stream()), "cudaEventRecord");
  }

 private:
  at::Tensor dst_;
  at::Tensor src_;
  c10::DeviceIndex device_;
  cudaEvent_t finished_;
};

class CudaQueue final : public TransferQueue {
 public:
  bool asynchronous(at::Device device) const override { return device.is_cuda(); }

  std::unique_ptr<Transfer> start(at::Tensor dst, at::Tensor src) override {
    detail::check_transfer(dst, src, "transfer");
    if (!dst.is_cuda() && !src.is_cuda()) return detail::copy_now(std::move(dst), std::move(src));
    const at::Device device = dst.is_cuda() ? dst.device() : src.device();
    c10::cuda::CUDAGuard guard(device);
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device.index());
    auto t = std::make_unique<CudaTransfer>(std::move(dst), std::move(src), device.index());
    t->launch(compute, copy_stream(device.index()));
    return t;
  }

 private:
  // One stream per device, so copies run in the order they were started.
  c10::cuda::CUDAStream copy_stream(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(device);
    if (it == streams_.end()) {
      it = streams_.emplace(device, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)).first;
    }
    return it->second;
  }

  std::mutex mu_;
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams_;
};

#endif  // ACTKIT_WITH_CUDA

}  // namespace

std::unique_ptr<Transfer> detail::copy_now(at::Tensor dst, at::Tensor src) {
  dst.copy_(src);
  return std::make_unique<FinishedTransfer>(std::move(dst));
}

std::shared_ptr<TransferQueue> default_transfer_queue() {
#if defined(ACTKIT_WITH_CUDA)
  if (cuda_available()) {
    static const std::shared_ptr<TransferQueue> cuda = std::make_shared<CudaQueue>();
    return cuda;
  }
#endif
  static const std::shared_ptr<TransferQueue> immediate = std::make_shared<ImmediateQueue>();
  return immediate;
}

}  // namespace actkit
