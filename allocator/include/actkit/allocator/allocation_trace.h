// Allocation traces: the sequence of allocations and frees of a real run
// (recorded by TrackingAllocator), replayed against block-allocation
// policies to compare their fragmentation without running the model again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actkit/allocator/block_allocator.h"

namespace actkit {

struct TraceEvent {
  uint64_t id = 0;     // the block
  int64_t bytes = -1;  // requested size for an allocation; -1 for a free
  bool is_free() const { return bytes < 0; }
};

struct AllocationTrace {
  std::string name;
  std::vector<TraceEvent> events;

  // Largest sum of live requested bytes over the trace.
  int64_t peak_live_bytes() const;
  // Text form, one event per line: "a ID BYTES" or "f ID", after a
  // "# actkit allocation trace NAME" line. Throws IoError.
  void save(const std::string& path) const;
  // Throws IoError if unreadable, FormatError for a malformed line.
  static AllocationTrace load(const std::string& path);
};

// Replays `trace` through `allocator` (normally a fresh one) and returns its
// statistics. Frees of blocks allocated before the trace started are
// skipped; blocks still live at the end are freed. Throws OutOfMemory if the
// allocator's limit is hit.
BlockStats replay(const AllocationTrace& trace, BlockAllocator& allocator);

}  // namespace actkit
