#include "actkit/core/extent_map.h"

#include <stdexcept>
#include <string>

namespace actkit {

void ExtentMap::insert(uint64_t offset, uint64_t length) {
  by_offset_.emplace(offset, length);
  by_size_.emplace(length, offset);
  free_bytes_ += length;
}

void ExtentMap::erase(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

void ExtentMap::release(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first < offset + length) {
    throw std::logic_error("ExtentMap: released range overlaps free space at " + std::to_string(next->first));
  }
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > offset) {
      throw std::logic_error("ExtentMap: released range overlaps free space at " + std::to_string(prev->first));
    }
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      erase(prev);
    }
  }
  if (next != by_offset_.end() && offset + length == next->first) {
    length += next->second;
    erase(next);
  }
  insert(offset, length);
}

std::optional<uint64_t> ExtentMap::take(uint64_t length, uint64_t align) {
  if (length == 0) return std::nullopt;
  for (auto it = by_size_.lower_bound({length, 0}); it != by_size_.end(); ++it) {
    const uint64_t off = it->second;
    const uint64_t len = it->first;
    const uint64_t start = (off + align - 1) / align * align;
    if (start + length > off + len) continue;  // alignment pushed it out
    erase(by_offset_.find(off));
    if (start > off) insert(off, start - off);
    if (start + length < off + len) insert(start + length, off + len - start - length);
    return start;
  }
  return std::nullopt;
}

std::optional<ExtentMap::Extent> ExtentMap::take_ending_at(uint64_t end) {
  if (by_offset_.empty()) return std::nullopt;
  auto last = std::prev(by_offset_.end());
  if (last->first + last->second != end) return std::nullopt;
  const Extent e{last->first, last->second};
  erase(last);
  return e;
}

}  // namespace actkit
