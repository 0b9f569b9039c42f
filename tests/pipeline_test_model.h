// The small GPT-2 and pipeline settings the pipeline tests train, shared by
// the test and the stage processes it starts.
#pragma once

#include "actkit/pipeline/pipeline_config.h"

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
  c.optimizer = "sgd";
  c.lr = 0.05;
  c.seed = 7;
  return c;
}

}  // namespace actkit
