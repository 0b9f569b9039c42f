// Where a pipeline's examples come from. Stage 0 reads the inputs, the last
// stage the labels, each in its own process, so a source must give the same
// micro-batch for the same (step, index) in every process.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace actkit::pipeline {

struct MicroBatch {
  at::Tensor inputs;  // token ids (B, T), int64
  at::Tensor labels;  // next tokens (B, T), int64
  std::vector<int64_t> example_ids;  // stable dataset indices, one per row
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Micro-batch `index` of training step `step` (0-based, counting across
  // epochs).
  virtual MicroBatch train_batch(int64_t step, int index) = 0;
  // How many validation micro-batches there are, and each of them.
  virtual int64_t validation_batches() const = 0;
  virtual MicroBatch validation_batch(int64_t i) = 0;
};

}  // namespace actkit::pipeline
