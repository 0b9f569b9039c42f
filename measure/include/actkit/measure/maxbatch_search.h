// The largest batch that trains within a memory budget, per level: the
// driver behind `actkit maxbatch` (ActNN's Fig. 1 and Table 6).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actkit/core/level.h"
#include "actkit/models/zoo.h"

namespace actkit {

struct MaxBatchConfig {
  std::string model = "resnet50";
  ModelOptions options;
  int64_t length = 64;   // image size or sequence length
  std::vector<LevelConfig> levels = parse_level_list("L0,L1,L2,L3,L4,L5");
  int64_t budget = int64_t(1) << 30;  // bytes of simulated device memory (CPU)
  std::string device = "cpu";         // or "cuda[:N]": the real device, no budget
  uint64_t seed = 0;
  int64_t limit = 1 << 16;            // never probe above this batch
  // Training steps per probe; the last is timed. Two by default: the first
  // creates the optimizer's momentum after its backward, so only from the
  // second on does a step hold it through forward and backward, as every
  // step of a real run does.
  int steps = 2;
  // The simulated device's allocator for levels without the defrag switch:
  // "caching" or "caching:max_split=SIZE" (see block_allocator.h).
  std::string caching_policy = "caching";
};

struct BatchProbe {
  int64_t batch = 0;
  bool fits = false;
  double step_seconds = 0;    // of the last step, when it fits
  int64_t peak_reserved = 0;   // bytes the allocator held at most
  int64_t peak_allocated = 0;  // bytes live tensors held at most
  int64_t left_behind = 0;    // bytes still held by LibTorch after a failed probe (CPU)
};

struct MaxBatchResult {
  std::string level;
  std::string allocator;  // the policy the level ran under
  int64_t max_batch = 0;  // 0: not even batch 1 fits
  double throughput = 0;  // samples/s at max_batch
  std::vector<BatchProbe> probes;  // in the order tried
};

// For each level: doubles the batch until a training step (forward,
// backward, SGD with momentum) runs out of memory, then binary-searches the
// boundary (to within 1/64 of it). Every probe builds the model afresh under
// a fresh allocator (caching policy; defrag for levels with defrag=true), so
// an out-of-memory probe cannot affect the next one. On CUDA the process's
// CUDA allocator serves every level: levels with defrag=true need
// install_cuda_defrag_allocator() to have run, the others need it not to
// (`actkit maxbatch` runs such levels in child processes).
// Throws InvalidInput for a bad model/level/budget or such a mismatch, Error
// if a successful probe leaks memory.
std::vector<MaxBatchResult> run_maxbatch(const MaxBatchConfig& config,
                                         const std::function<void(const std::string&, const BatchProbe&)>& on_probe);

}  // namespace actkit
