// The small GPT-2 and pipeline settings the pipeline tests train, shared by
// the test and the stage processes it starts.
#pragma once

#include <memory>

#include "actkit/app/pipeline_batches.h"
#include "actkit/data/training_data.h"
#include "actkit/optim/local_optimizer.h"
#include "actkit/pipeline/pipeline_config.h"
#include "actkit/pipeline/stage_runner.h"

namespace actkit {

inline pipeline::PipelineConfig test_pipeline_config(int stages) {
  pipeline::PipelineConfig c;
  c.model = "gpt2";
  c.model_options.layers = 4;
  c.model_options.hidden = 64;
  c.model_options.heads = 2;
  c.model_options.vocab_size = 256;
  c.model_options.max_positions = 16;
  c.model_options.dropout = 0.0;  // the reference must see the same arithmetic
  c.seq_len = 16;
  c.stages = stages;
  c.micro_batches = 4;
  c.micro_batch_size = 2;
  // SGD: Adam divides each gradient by its own running size, so on the
  // entries whose gradient is rounding noise (the key bias's, zero in exact
  // arithmetic) it turns a difference in the last bit into a whole step.
  c.optimizer = "sgd";  // what local_optimizer() makes
  c.lr = 0.05;
  c.seed = 7;
  return c;
}

// The stages' optimizer of test_pipeline_config (SGD at its rate), made
// as the app makes a stage's.
inline pipeline::Replication local_optimizer(const pipeline::PipelineConfig& c) {
  pipeline::Replication r;
  r.make_optimizer = [lr = c.lr, decay = c.weight_decay](std::vector<at::Tensor> params) {
    return optim::make_local_optimizer(optim::LocalOptimizer::kSgd, std::move(params), lr, decay);
  };
  return r;
}

// The tests' data: random tokens, a pool of `pool` examples seen in turn
// (0: every example new), dealt as `micro_batches` micro-batches a step in
// `shares` runs (one per replica), with 2 validation micro-batches.
struct TestBatches {
  std::unique_ptr<TrainingData> data;
  std::unique_ptr<app::PipelineBatches> batches;
};
inline TestBatches test_batches(const pipeline::PipelineConfig& c, int64_t pool, int micro_batches, int shares = 1) {
  DataOptions o;
  o.set = DataSet::kSynthetic;
  o.text = true;
  o.seq_len = c.seq_len;
  o.vocab = c.model_options.vocab_size;
  o.train_limit = pool;
  o.seed = c.seed;
  TestBatches t;
  t.data = TrainingData::open(o);
  t.batches = std::make_unique<app::PipelineBatches>(*t.data, c.micro_batch_size, micro_batches, shares, 2);
  return t;
}

}  // namespace actkit
