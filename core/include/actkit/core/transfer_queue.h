// Copies between device memory and host memory that overlap computation.
// On CUDA a copy waits for the work already queued on the device's current
// stream, then runs on a copy stream of its own (one per device, so copies
// run in the order they were started), while compute goes on; the caller
// learns of its end through the Transfer it gets back. On the CPU a copy
// runs at once and its Transfer is finished on return.
//
// Lifetime rule, which is what makes this safe under any allocator: a
// Transfer holds its source and destination tensors until it is destroyed,
// and destroying one that may still be running first waits for it. So no
// memory a copy touches is handed back while the copy can still touch it.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

namespace actkit {

class Transfer {
 public:
  virtual ~Transfer() = default;
  // True once the copy has finished; never blocks.
  virtual bool done() = 0;
  // Blocks the calling thread until the copy has finished. Throws Error if
  // the device reports a failure.
  virtual void wait() = 0;
  // Makes the work queued from now on on the current stream of the device
  // involved wait for the copy, without blocking the calling thread.
  virtual void order_before_current_stream() = 0;
  // The copy's destination (valid to read once ordered or waited for).
  virtual const at::Tensor& destination() const = 0;
};

class TransferQueue {
 public:
  virtual ~TransferQueue() = default;
  // Whether copies between `device` and the host run behind the caller's
  // back (CUDA); false where start() finishes the copy before it returns.
  virtual bool asynchronous(at::Device device) const = 0;
  // Starts dst.copy_(src). Both must have the same dtype and number of
  // bytes and be contiguous, and at least one must be host memory: on CUDA
  // page-locked (allocate_host), or the copy cannot run asynchronously.
  // Throws InvalidInput for tensors that break this, Error if the device
  // refuses the copy.
  virtual std::unique_ptr<Transfer> start(at::Tensor dst, at::Tensor src) = 0;
};

// The queue for this build and machine: a copy stream per CUDA device when
// CUDA is available, immediate copies otherwise. Lives as long as the process.
std::shared_ptr<TransferQueue> default_transfer_queue();

namespace detail {
// Checks start()'s preconditions; throws InvalidInput naming `what`.
void check_transfer(const at::Tensor& dst, const at::Tensor& src, const char* what);
// A finished copy: dst.copy_(src) done before it returns.
std::unique_ptr<Transfer> copy_now(at::Tensor dst, at::Tensor src);
}  // namespace detail

}  // namespace actkit
