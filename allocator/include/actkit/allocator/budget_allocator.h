// LibTorch CPU allocators built on a BlockAllocator policy and real memory:
// a simulated device of a given size. Allocations past the budget throw
// actkit::OutOfMemory, which is what `actkit maxbatch` catches, so a
// max-batch search runs on the CPU as it would on a GPU of that size. With
// the caching policy it behaves like PyTorch's CUDA allocator; with the
// defrag policy it is the L5 allocator.
//
// Memory is one anonymous mapping reserved up front (nothing is touched until
// used); decommitted ranges are returned to the kernel with MADV_DONTNEED,
// so the process's resident memory follows the allocator's reserved bytes.
#pragma once

#include <c10/core/Allocator.h>

#include <memory>
#include <mutex>
#include <string>

#include "actkit/allocator/block_allocator.h"

namespace actkit {

class BudgetAllocator final : public c10::Allocator {
 public:
  // `policy` is "caching" or "defrag"; `budget` bytes (-1: no limit).
  // Throws InvalidInput for an unknown policy, std::bad_alloc if the address
  // range cannot be mapped. Instances are never destroyed while a block they
  // handed out is alive: if blocks remain when the last shared_ptr goes (a
  // LibTorch cache, a failed graph's gradients), the allocator and its
  // mapping live until the last of them is freed.
  static std::shared_ptr<BudgetAllocator> create(const std::string& policy, int64_t budget);

  // Both constness variants: LibTorch 1.13 declares allocate() const, 2.x
  // does not. Throws OutOfMemory past the budget.
  c10::DataPtr allocate(size_t bytes) const;
  c10::DataPtr allocate(size_t bytes);
  void copy_data(void* dest, const void* src, std::size_t count) const;
  c10::DeleterFnPtr raw_deleter() const override { return &BudgetAllocator::release; }

  BlockStats stats() const;
  void reset_peaks();
  // Returns cached memory to the kernel (what a failed probe does).
  void release_cached();
  const char* policy() const;
  // Runs the policy's invariant check. Throws std::logic_error.
  void check_invariants() const;

  ~BudgetAllocator() override;

 private:
  class Mapping;
  BudgetAllocator(const std::string& policy, int64_t budget);
  static void release(void* data);
  void free_block(void* data);

  std::unique_ptr<Mapping> mapping_;
  std::unique_ptr<BlockAllocator> blocks_;
  mutable std::mutex mu_;
  bool orphaned_ = false;  // the shared_ptr is gone; delete with the last block
};

}  // namespace actkit
