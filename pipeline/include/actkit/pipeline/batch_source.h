// Where a pipeline's examples come from. Stage 0 reads the inputs, the last
// stage the labels, each in its own process, so a source must give the same
// micro-batch for the same (step, index) in every process.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/StringUtil.h>

#include <cstdint>
#include <vector>

#include "actkit/core/errors.h"

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

// Where micro-batch `index` of step `step` lies in a stream whose steps are
// `shares` runs of `micro_batches` micro-batches of `batch` examples (one run
// per data-parallel replica, as ReplicaShare deals them): the share it reads
// from and the position of its first example in that share's own stream.
// Throws InvalidInput for an index outside [0, micro_batches · shares).
struct SharePosition {
  int share;
  int64_t first;
};
inline SharePosition share_position(int64_t step, int index, int micro_batches, int shares, int64_t batch) {
  if (index < 0 || index >= micro_batches * shares) {
    throw InvalidInput(c10::str("micro-batch ", index, " of ", micro_batches * shares, " per step"));
  }
  return {index / micro_batches, (step * micro_batches + index % micro_batches) * batch};
}

// Replica `replica` of `replicas` data-parallel pipelines of
// `micro_batches` micro-batches each: its micro-batch m of a step is
// micro-batch replica·micro_batches + m of `all`, a source dealing
// replicas·micro_batches per step. The replicas together then see what one
// pipeline with replicas·micro_batches micro-batches would, in that order.
// Validation comes from `all` unchanged. `all` must outlive it.
class ReplicaShare : public BatchSource {
 public:
  ReplicaShare(BatchSource& all, int replica, int micro_batches)
      : all_(all), first_(replica * micro_batches) {}
  MicroBatch train_batch(int64_t step, int index) override { return all_.train_batch(step, first_ + index); }
  int64_t validation_batches() const override { return all_.validation_batches(); }
  MicroBatch validation_batch(int64_t i) override { return all_.validation_batch(i); }

 private:
  BatchSource& all_;
  int first_;
};

}  // namespace actkit::pipeline
