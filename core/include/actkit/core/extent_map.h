// Free space of an address range (a file, a virtual arena): address-ordered
// free extents, coalesced on release, with best-fit allocation (smallest
// extent that fits, lowest address among equals), carving from the start so
// blocks pack towards low addresses. O(log n) per operation.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace actkit {

class ExtentMap {
 public:
  struct Extent {
    uint64_t offset = 0;
    uint64_t length = 0;
  };

  // Adds [offset, offset + length) to the free space, merging neighbours.
  // Throws std::logic_error if it overlaps space that is already free (a
  // double free).
  void release(uint64_t offset, uint64_t length);

  // Takes `length` bytes from the best-fitting free extent, at an offset
  // that is a multiple of `align` (a power of two). nullopt if none fits.
  std::optional<uint64_t> take(uint64_t length, uint64_t align = 1);

  // Removes and returns the free extent that ends exactly at `end`, if any
  // (for growing a file or arena at its top).
  std::optional<Extent> take_ending_at(uint64_t end);

  uint64_t free_bytes() const { return free_bytes_; }
  size_t extent_count() const { return by_offset_.size(); }
  const std::map<uint64_t, uint64_t>& extents() const { return by_offset_; }

 private:
  void insert(uint64_t offset, uint64_t length);
  void erase(std::map<uint64_t, uint64_t>::iterator it);

  std::map<uint64_t, uint64_t> by_offset_;           // offset -> length
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (length, offset)
  uint64_t free_bytes_ = 0;
};

}  // namespace actkit
