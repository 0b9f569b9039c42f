// Memory and time of one training step per level: the driver behind
// `actkit memory` and the memory figures in docs/benchmarks.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actkit/core/level.h"
#include "actkit/models/zoo.h"
#include "actkit/measure/node_profile.h"

namespace actkit {

struct StepMeasurement {
  std::string level;
  // As ActNN reports it: bytes allocated right before backward, minus bytes
  // allocated before forward, minus the output and loss tensors.
  int64_t activation_bytes = 0;
  // Peak bytes held during the first step after the warm-up (weights,
  // momentum, gradients, activations: a steady-state step).
  int64_t peak_bytes = 0;
  double step_seconds = 0;  // forward + backward + SGD step
  double compression_ratio = 1;  // bytes handed to the codecs / bytes they produced
  // Swapping levels (L4/L5), per step on average over every step run: bytes
  // moved out, host time load() took, payloads brought back ahead of need
  // (device copies + file reads), loads served before the payload left.
  double swapped_bytes = 0;
  double swap_wait_seconds = 0;
  double read_ahead = 0;
  double never_left = 0;
  // Only with per_node, from an extra step after the timed ones: the peak
  // from the start of forward to the loss, and backward node by node.
  int64_t forward_peak_bytes = 0;
  std::vector<NodePeak> nodes;
};

struct LevelMemoryConfig {
  std::string model = "resnet50";
  ModelOptions options;
  int64_t batch = 8;
  int64_t length = 224;  // image size or sequence length
  std::vector<LevelConfig> levels = parse_level_list("L0,L1,L2,L3");
  uint64_t seed = 0;
  int steps = 2;  // timed steps per level after one warm-up step
  std::string device = "cpu";  // or "cuda[:N]" (memory from the CUDA caching allocator)
  bool per_node = false;       // profile one more step's backward node by node
};

// Activation memory as ActNN measures it: bytes held right before backward
// (`ready`) minus bytes held before forward (`before`), minus the output and
// loss tensors themselves.
int64_t activation_bytes(int64_t before, int64_t ready, const at::Tensor& output, const at::Tensor& loss);

// Builds the model once per level (same seed, so same weights and inputs),
// converts it, and measures training steps on `device` (the CPU with the
// tracking allocator installed, or CUDA). Throws InvalidInput for an unknown model or level, or
// a batch/length below 1.
std::vector<StepMeasurement> measure_level_memory(const LevelMemoryConfig& config);

}  // namespace actkit
