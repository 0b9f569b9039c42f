#include "actkit/bench/allreduce_bench.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <chrono>

#include "actkit/comm/compressed_allreduce.h"
#include "actkit/core/errors.h"

namespace actkit::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Times `iterations` calls of `call` after one untimed one; the slowest
// rank's mean (every rank leaves a collective when the last one arrives,
// but the compressed allreduce's own arithmetic differs per rank).
template <class Call>
double time_calls(Communicator& comm, int iterations, Call call) {
  call();
  comm.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) call();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / iterations;
  at::Tensor slowest = at::tensor({float(seconds)});
  // A maximum through the sum: the ranks' times, each in its own slot.
  at::Tensor slots = at::zeros({comm.world_size()});
  slots[comm.rank()] = slowest[0];
  comm.all_reduce_sum(slots, "the allreduce benchmark's timings");
  return double(slots.max().item<float>());
}

}  // namespace

AllreduceBenchReport run_allreduce_bench(Communicator& comm, const AllreduceBenchConfig& config) {
  if (config.bytes < int64_t(sizeof(float)) || config.iterations < 1) {
    throw InvalidInput(c10::str("allreduce benchmark: ", config.bytes, " bytes, ", config.iterations,
                                " iterations: expected at least 4 bytes and 1 iteration"));
  }
  AllreduceBenchReport r;
  r.ranks = comm.world_size();
  const int64_t numel = config.bytes / int64_t(sizeof(float));
  r.bytes = numel * int64_t(sizeof(float));
  at::manual_seed(int64_t(comm.rank()) + 1);
  const at::Tensor input = at::randn({numel});
  at::Tensor buffer = input.clone();

  r.fp32.seconds = time_calls(comm, config.iterations, [&] {
    buffer.copy_(input);
    comm.all_reduce_sum(buffer, "fp32 allreduce (benchmark)");
  });
  r.fp32.wire_bytes = 2 * (r.ranks - 1) * r.bytes / r.ranks;  // the ring's, as Communicator counts it

  CompressedAllreduce onebit(&comm, numel);
  r.onebit.seconds = time_calls(comm, config.iterations, [&] {
    buffer.copy_(input);
    onebit.average(buffer, "1-bit allreduce (benchmark)");
  });
  r.onebit.wire_bytes = onebit.wire_bytes_per_call();
  // The copies of the input are the same in both, and cost next to nothing
  // against either call.
  for (AllreduceResult* x : {&r.fp32, &r.onebit}) x->algorithm_gbps = double(r.bytes) / x->seconds / 1e9;
  return r;
}

}  // namespace actkit::bench
