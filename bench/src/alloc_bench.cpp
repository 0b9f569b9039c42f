#include "actkit/bench/alloc_bench.h"
#include "actkit/measure/training_setup.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <sstream>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/converters/convert.h"
#include "actkit/models/zoo.h"
#include "actkit/core/errors.h"

namespace actkit::bench {

std::string TraceSpec::name() const { return c10::str(model, " b", batch, " ", length, " ", level.spec); }

TraceSpec parse_trace_spec(const std::string& text) {
  // Three fields, then the level with its own overrides ("L3:bits=1.5").
  std::vector<std::string> parts;
  size_t start = 0;
  while (parts.size() < 3) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
    if (parts.size() == 3) parts.push_back(text.substr(start));
  }
  if (parts.size() < 3 || (parts.size() == 4 && parts[3].empty())) {
    throw InvalidInput("trace spec '" + text +
                       "': expected MODEL:BATCH:LENGTH[:LEVEL], e.g. resnet50:8:224:L3 or resnet50:8:224:L3:bits=1.5");
  }
  TraceSpec s;
  s.model = parts[0];
  try {
    s.batch = std::stoll(parts[1]);
    s.length = std::stoll(parts[2]);
  } catch (const std::exception&) {
    throw InvalidInput("trace spec '" + text + "': batch and length must be integers");
  }
  if (s.batch < 1 || s.length < 1) throw InvalidInput("trace spec '" + text + "': batch and length must be >= 1");
  if (parts.size() == 4) s.level = parse_level(parts[3]);
  return s;
}

AllocationTrace record_training_trace(const TraceSpec& spec, int steps, uint64_t seed) {
  ModelOptions o;
  o.max_positions = std::max<int64_t>(spec.length, 1024);
  ScopedCpuTracking tracking;
  TrainingSetup t = make_training_setup(spec.model, o, spec.length, spec.batch, spec.level, seed);
  tracking.tracker().start_recording();
  for (int s = 0; s < steps; ++s) t.step();
  return tracking.tracker().stop_recording(spec.name());
}

ReplayRow replay_policies(const AllocationTrace& trace) {
  ReplayRow row;
  row.trace = trace.name;
  row.events = int64_t(trace.events.size());
  row.peak_allocated = trace.peak_live_bytes();
  for (const char* policy : {"caching", "defrag"}) {
    auto a = make_block_allocator(policy);
    row.policies.emplace_back(policy, replay(trace, *a));
    a->check_invariants();
  }
  return row;
}

}  // namespace actkit::bench
