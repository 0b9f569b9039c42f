// Placement policies for device memory, separated from the memory itself.
// A BlockAllocator hands out addresses in a virtual range and decides how
// many bytes are reserved (taken from the device) at any time; a
// MemoryBacking, if given, is told which ranges to commit and decommit. The
// same policy object therefore drives real memory (BudgetAllocator) and
// trace replay (replay(), no memory at all), so the fragmentation measured in
// a replay is the one a real run gets.
//
//   caching  PyTorch's CUDA caching allocator's policy: 512-byte rounding,
//            a small pool (<= 1 MiB, 2 MiB segments) and a large pool (20 MiB
//            segments, or the request rounded to 2 MiB), best fit inside a
//            pool, splitting and coalescing only inside a segment; segments
//            go back only when an allocation would pass the limit.
//            "caching:max_split=SIZE" adds PyTorch's max_split_size_mb:
//            cached blocks of SIZE or more are never split.
//   defrag   the L5 allocator: one address-ordered arena with best fit,
//            splitting and coalescing across the whole range, and memory
//            committed per 2 MiB granule only where live blocks are (what
//            CUDA virtual-memory stitching and expandable segments do), so a
//            hole costs nothing once it spans a granule; blocks up to 256 KiB
//            come from size-class slabs of one granule each.
//
// Fragmentation = 1 - peak allocated / peak reserved, where allocated counts
// the bytes callers asked for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace actkit {

struct BlockStats {
  int64_t allocated = 0;       // bytes requested by live blocks
  int64_t peak_allocated = 0;
  int64_t reserved = 0;        // bytes taken from the device
  int64_t peak_reserved = 0;
  int64_t allocations = 0;
  int64_t out_of_memory = 0;   // allocations refused
  double fragmentation() const {
    return peak_reserved > 0 ? 1.0 - double(peak_allocated) / double(peak_reserved) : 0.0;
  }
};

// Receives the ranges (offsets in the allocator's address space) that become
// reserved or unreserved.
class MemoryBacking {
 public:
  virtual ~MemoryBacking() = default;
  // Makes [offset, offset + bytes) usable. Throws OutOfMemory, having
  // committed nothing, when the memory behind it is exhausted (a device
  // shared with other processes): the policy then gives back what it caches
  // and retries once before refusing the allocation, its state unchanged.
  virtual void commit(uint64_t offset, uint64_t bytes) = 0;
  // Gives a committed range back. Must not throw.
  virtual void decommit(uint64_t offset, uint64_t bytes) = 0;
};

class BlockAllocator {
 public:
  virtual ~BlockAllocator() = default;
  virtual const char* name() const = 0;

  // Address of a new block of `bytes` (0 is allowed and gets a distinct
  // minimum block). Releases cached memory and retries before refusing;
  // throws OutOfMemory if the limit still cannot hold it.
  virtual uint64_t allocate(uint64_t bytes) = 0;
  // Frees a block. Throws InvalidInput for an address that is not live.
  virtual void free(uint64_t address) = 0;
  // Gives reserved memory that holds no live block back to the device.
  virtual void release_cached() = 0;
  // Size of the virtual range addresses come from.
  virtual uint64_t address_space() const = 0;
  // Recomputes the allocator's state from scratch and compares it with the
  // incremental one (blocks disjoint and inside the range, counts and
  // reserved bytes consistent). Throws std::logic_error. O(blocks).
  virtual void check_invariants() const = 0;

  const BlockStats& stats() const { return stats_; }
  // Restarts the peaks from the current values.
  void reset_peaks();
  int64_t limit() const { return limit_; }

 protected:
  BlockAllocator(int64_t limit, MemoryBacking* backing) : limit_(limit), backing_(backing) {}
  bool fits(int64_t more_reserved) const { return limit_ < 0 || stats_.reserved + more_reserved <= limit_; }
  void reserve(uint64_t offset, uint64_t bytes);
  void unreserve(uint64_t offset, uint64_t bytes);
  void count_allocation(uint64_t bytes);
  void count_free(uint64_t bytes);
  [[noreturn]] void refuse(uint64_t bytes);

  BlockStats stats_;

 private:
  int64_t limit_;
  MemoryBacking* backing_;
};

// `limit`: bytes the allocator may reserve, -1 for no limit. `backing` may
// be null (replay) and must outlive the allocator. `address_space` 0 picks
// a range large enough for the limit (64 GiB without one). `max_split`:
// PyTorch's max_split_size in bytes (no limit by default); InvalidInput if
// it is 1 MiB or less.
std::unique_ptr<BlockAllocator> make_caching_allocator(int64_t limit = -1, MemoryBacking* backing = nullptr,
                                                       uint64_t address_space = 0,
                                                       uint64_t max_split = UINT64_MAX);
// `retain_freed`: granules that empty stay reserved (counted) until an
// allocation would pass the limit, so real memory is not faulted in again
// every step; replays leave it off to measure the policy's own footprint.
std::unique_ptr<BlockAllocator> make_defrag_allocator(int64_t limit = -1, MemoryBacking* backing = nullptr,
                                                      uint64_t address_space = 0, bool retain_freed = false);
// "caching", "caching:max_split=SIZE" (SIZE as in 32M, 1GiB) or "defrag";
// throws InvalidInput for anything else.
std::unique_ptr<BlockAllocator> make_block_allocator(const std::string& kind, int64_t limit = -1,
                                                     MemoryBacking* backing = nullptr, uint64_t address_space = 0);

}  // namespace actkit
