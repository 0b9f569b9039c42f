#include "actkit/app/pipeline_batches.h"

#include <c10/util/StringUtil.h>

#include <algorithm>

#include "actkit/core/errors.h"

namespace actkit::app {
namespace {

pipeline::MicroBatch micro_batch(Batch b) { return {b.inputs, b.labels, std::move(b.example_ids)}; }

}  // namespace

PipelineBatches::PipelineBatches(const TrainingData& data, int64_t batch, int micro_batches, int shares,
                                 int64_t validation_batches)
    : data_(data), batch_(batch), micro_batches_(micro_batches), shares_(shares),
      validation_batches_(std::min(validation_batches, data.validation_size() / std::max<int64_t>(1, batch))) {
  if (!data.text()) throw InvalidInput("pipeline: the stages read token sequences, not images");
  if (batch < 1 || micro_batches < 1 || shares < 1 || validation_batches < 0) {
    throw InvalidInput(c10::str("pipeline batches: batch ", batch, ", ", micro_batches, " micro-batches, ", shares,
                                " shares, ", validation_batches, " validation batches"));
  }
  if (data.train_size() > 0 && data.train_size() < shares) {
    throw InvalidInput(c10::str("pipeline: ", data.train_size(), " training examples cannot be shared by ", shares,
                                " replicas"));
  }
}

pipeline::MicroBatch PipelineBatches::train_batch(int64_t step, int index) {
  if (step < 0) throw InvalidInput(c10::str("pipeline batches: step ", step, " (steps count from 0)"));
  const pipeline::SharePosition where = pipeline::share_position(step, index, micro_batches_, shares_, batch_);
  return micro_batch(data_.train_batch(where.first, batch_, where.share, shares_));
}

pipeline::MicroBatch PipelineBatches::validation_batch(int64_t i) {
  if (i < 0 || i >= validation_batches_) {
    throw InvalidInput(c10::str("validation batch ", i, " of ", validation_batches_));
  }
  return micro_batch(data_.validation_batch(i * batch_, batch_));
}

}  // namespace actkit::app
