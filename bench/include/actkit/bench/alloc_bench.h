// Fragmentation of the L5 allocator against the PyTorch-style caching
// baseline on allocation traces of real training steps: the driver behind
// `actkit bench alloc`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actkit/allocator/allocation_trace.h"
#include "actkit/core/level.h"

namespace actkit::bench {

// A run to record: zoo model, batch, image size / sequence length, level.
struct TraceSpec {
  std::string model;
  int64_t batch = 0;
  int64_t length = 0;
  LevelConfig level = level_preset("L0");
  std::string name() const;
};

// Parses "resnet50:8:224:L3" (level optional, default L0). Throws InvalidInput.
TraceSpec parse_trace_spec(const std::string& text);

// Records `steps` training steps (forward, backward, SGD with momentum;
// model building excluded) through the tracking allocator.
AllocationTrace record_training_trace(const TraceSpec& spec, int steps = 2, uint64_t seed = 0);

struct ReplayRow {
  std::string trace;
  int64_t events = 0;
  int64_t peak_allocated = 0;
  std::vector<std::pair<std::string, BlockStats>> policies;  // policy name -> stats
};

// Replays a trace through a fresh caching and a fresh defrag allocator.
ReplayRow replay_policies(const AllocationTrace& trace);

}  // namespace actkit::bench
