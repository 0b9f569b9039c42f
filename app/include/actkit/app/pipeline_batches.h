// The pipeline's micro-batches from the training data: each step's
// micro-batches are `shares` runs of `micro_batches` (one per data-parallel
// replica, as pipeline::ReplicaShare deals them), run r read from share r
// of the data only, so every replica sees the same examples every epoch.
#pragma once

#include "actkit/data/training_data.h"
#include "actkit/pipeline/batch_source.h"

namespace actkit::app {

class PipelineBatches : public pipeline::BatchSource {
 public:
  // `data` (text) must outlive it. `validation_batches`: at most that many
  // micro-batches of validation, as many whole ones as the data holds.
  // Throws InvalidInput for image data or a setting below 1.
  PipelineBatches(const TrainingData& data, int64_t batch, int micro_batches, int shares, int64_t validation_batches);
  pipeline::MicroBatch train_batch(int64_t step, int index) override;
  int64_t validation_batches() const override { return validation_batches_; }
  pipeline::MicroBatch validation_batch(int64_t i) override;

 private:
  const TrainingData& data_;
  int64_t batch_;
  int micro_batches_, shares_;
  int64_t validation_batches_;
};

}  // namespace actkit::app
