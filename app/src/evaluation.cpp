#include "actkit/app/evaluation.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

#include "actkit/app/train_step.h"
#include "actkit/core/errors.h"

namespace actkit::app {

EvaluationPlan evaluation_plan(const TrainingData& data, int64_t text_batch) {
  if (text_batch < 1) throw InvalidInput("evaluate: the batch must be >= 1");
  EvaluationPlan p;
  p.text = data.text();
  p.batch = p.text ? text_batch : kAccuracyBatch;
  p.examples = p.text ? std::min(data.validation_size(), kValidationBatches * p.batch) : data.validation_size();
  // Classifiers count every example (the last batch may be short); language
  // models average whole batches' mean losses (a short one only when no
  // whole batch exists).
  p.batches = p.text ? std::max<int64_t>(p.examples > 0 ? 1 : 0, p.examples / p.batch)
                     : (p.examples + p.batch - 1) / p.batch;
  return p;
}

double evaluate_batch(ZooModel& model, const TrainingData& data, const EvaluationPlan& plan, int64_t i,
                      at::Device device) {
  if (i < 0 || i >= plan.batches) throw InvalidInput(c10::str("evaluate: batch ", i, " of ", plan.batches));
  const int64_t first = i * plan.batch;
  const Batch b = data.validation_batch(first, std::min(plan.batch, plan.examples - first));
  const at::Tensor out = model.forward(b.inputs.to(device));
  if (plan.text) return batch_loss(model, b.inputs, out, b.labels.to(device)).item<double>();
  return double(out.argmax(1).cpu().eq(b.labels).sum().item<int64_t>());
}

double evaluation_score(const EvaluationPlan& plan, const std::vector<double>& scores) {
  if (int64_t(scores.size()) != plan.batches) {
    throw InvalidInput(c10::str("evaluate: ", scores.size(), " scores for ", plan.batches, " batches"));
  }
  double sum = 0;
  for (double s : scores) sum += s;
  const int64_t counted = plan.text ? plan.batches : plan.examples;
  return sum / double(std::max<int64_t>(1, counted));
}

double evaluate(ZooModel& model, const TrainingData& data, int64_t text_batch, at::Device device) {
  const EvaluationPlan plan = evaluation_plan(data, text_batch);
  torch::NoGradGuard no_grad;
  model.eval();
  std::vector<double> scores;
  for (int64_t i = 0; i < plan.batches; ++i) scores.push_back(evaluate_batch(model, data, plan, i, device));
  model.train();
  return evaluation_score(plan, scores);
}

}  // namespace actkit::app
