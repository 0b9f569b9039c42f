#include "actkit/allocator/block_allocator.h"

#include <c10/util/StringUtil.h>

#include <algorithm>

#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "block_allocator_impl.h"

namespace actkit {

void BlockAllocator::reset_peaks() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void BlockAllocator::reserve(uint64_t offset, uint64_t bytes) {
  if (backing_ != nullptr) backing_->commit(offset, bytes);
  stats_.reserved += int64_t(bytes);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
}

void BlockAllocator::unreserve(uint64_t offset, uint64_t bytes) {
  if (backing_ != nullptr) backing_->decommit(offset, bytes);
  stats_.reserved -= int64_t(bytes);
}

void BlockAllocator::count_allocation(uint64_t bytes) {
  stats_.allocated += int64_t(bytes);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.allocations;
}

void BlockAllocator::count_free(uint64_t bytes) { stats_.allocated -= int64_t(bytes); }

void BlockAllocator::refuse(uint64_t bytes) {
  ++stats_.out_of_memory;
  throw OutOfMemory(c10::str(name(), " allocator: out of memory allocating ", bytes, " bytes (", stats_.allocated,
                             " allocated, ", stats_.reserved, " reserved, limit ", limit_, ")"));
}

namespace detail {
uint64_t default_address_space(int64_t limit, uint64_t requested) {
  if (requested != 0) return round_up(requested, kGranule);
  if (limit < 0) return uint64_t(64) << 30;
  return round_up(std::max<uint64_t>(uint64_t(limit) * 4, uint64_t(4) << 30), kGranule);
}
}  // namespace detail

std::unique_ptr<BlockAllocator> make_block_allocator(const std::string& kind, int64_t limit, MemoryBacking* backing,
                                                     uint64_t address_space) {
  if (kind == "caching") return make_caching_allocator(limit, backing, address_space);
  const std::string max_split = "caching:max_split=";
  if (kind.rfind(max_split, 0) == 0) {
    return make_caching_allocator(limit, backing, address_space,
                                  uint64_t(parse_byte_size(kind.substr(max_split.size()))));
  }
  if (kind == "defrag") return make_defrag_allocator(limit, backing, address_space);
  throw InvalidInput(c10::str("unknown allocator '", kind, "' (caching, caching:max_split=SIZE or defrag)"));
}

}  // namespace actkit
