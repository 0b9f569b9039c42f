// How well a model does on a data set's validation examples: the accuracy
// of a classifier or the mean loss of a language model, whole or cut into
// batches that ranks share.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "actkit/data/training_data.h"
#include "actkit/models/zoo.h"

namespace actkit::app {

// How well `model` does on the validation examples, on `device`:
// classifiers, the accuracy over every one (the test split, or its first
// DataOptions::validation_limit; in batches of
// kAccuracyBatch); language models, the mean loss per token over up to
// kValidationBatches batches of `batch` (a short one only when the text
// holds no whole batch). The model is in eval mode meanwhile and back in
// train mode after.
constexpr int64_t kAccuracyBatch = 500;
// The fortunes' validation text at the default length is about 600 examples.
constexpr int64_t kValidationBatches = 32;
double evaluate(ZooModel& model, const TrainingData& data, int64_t batch, at::Device device);

// The same evaluation cut into its batches, so that ranks can share it:
// each evaluates its own batches (evaluate_batch), the per-batch scores are
// combined (a sum in which every batch is scored by one rank and is zero
// elsewhere is exact), and evaluation_score gives what evaluate would have,
// bit for bit, whichever rank scored which batch.
struct EvaluationPlan {
  bool text = false;
  int64_t batch = 0;    // examples per batch (the last may be short)
  int64_t batches = 0;  // how many
  int64_t examples = 0; // in all
};
// Throws InvalidInput for text_batch < 1.
EvaluationPlan evaluation_plan(const TrainingData& data, int64_t text_batch);
// Batch i's score (0 <= i < plan.batches): a classifier's count of right
// answers, a language model's mean loss. The caller sets eval mode and no-grad.
double evaluate_batch(ZooModel& model, const TrainingData& data, const EvaluationPlan& plan, int64_t i,
                      at::Device device);
// The accuracy or mean loss from every batch's score, in batch order.
double evaluation_score(const EvaluationPlan& plan, const std::vector<double>& scores);

}  // namespace actkit::app
