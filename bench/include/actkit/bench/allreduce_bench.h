// The allreduce benchmark behind `actkit bench allreduce`: the 1-bit
// compressed allreduce (comm/compressed_allreduce.h) against Gloo's plain
// fp32 allreduce, on the same buffer, in the same group, in the same run,
// so the ratio means something on any machine and link. Every rank of the
// group calls it.
#pragma once

#include <cstdint>

#include "actkit/comm/communicator.h"

namespace actkit::bench {

struct AllreduceBenchConfig {
  int64_t bytes = int64_t(64) << 20;  // the fp32 buffer being averaged
  int iterations = 5;                 // timed calls of each, after one untimed
};

// Per call, on this rank: seconds (the slowest rank's, as everyone waits
// for it), the buffer's bytes over that time ("algorithm bandwidth": what
// the caller sees move), and what the call put on this rank's wire.
struct AllreduceResult {
  double seconds = 0;
  double algorithm_gbps = 0;
  int64_t wire_bytes = 0;
};

struct AllreduceBenchReport {
  int ranks = 1;
  int64_t bytes = 0;
  AllreduceResult fp32;    // Communicator::all_reduce_sum (Gloo's ring allreduce)
  AllreduceResult onebit;  // CompressedAllreduce::average: encode, all-to-all, average, encode, all-gather, decode
};

// Throws InvalidInput for a config with no bytes or iterations, CommError
// when a rank fails (Communicator's errors).
AllreduceBenchReport run_allreduce_bench(Communicator& comm, const AllreduceBenchConfig& config);

}  // namespace actkit::bench
