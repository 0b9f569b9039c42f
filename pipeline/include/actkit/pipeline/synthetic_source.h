// Random token sequences: the `--data synthetic` source and the tests'.
// Each micro-batch is drawn from its own generator seeded by (seed, step,
// index), so every process draws the same one without talking. With a pool
// of N examples, position p of the stream is example p mod N instead (its
// tokens drawn from (seed, id)), so examples come back every epoch, as
// AQ-SGD's buffers need. With `shares` > 1 the stream's micro-batches of a
// step are `shares` runs of `micro_batches` (one per data-parallel replica,
// as ReplicaShare deals them), and share r cycles through its own part of
// the pool, the ids r, r + shares, ... (pool / shares of them).
#pragma once

#include "actkit/pipeline/batch_source.h"

namespace actkit::pipeline {

class SyntheticSource : public BatchSource {
 public:
  // Micro-batches per step without a pool: fresh examples' ids are spaced
  // by this many micro-batches per step so that no two steps share one.
  static constexpr int kMaxFreshMicroBatches = 1024;

  // Micro-batches of `batch` sequences of `seq_len` tokens below `vocab`;
  // `validation` validation batches; `pool` > 0 examples seen in turn, by
  // steps of `micro_batches` micro-batches per share (0: every one new).
  // Throws InvalidInput for sizes < 1 and a pool smaller than `shares`;
  // train_batch throws for a negative step and a micro-batch index outside
  // the step (with a pool) or beyond kMaxFreshMicroBatches (without).
  SyntheticSource(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, int64_t validation = 2,
                  int64_t pool = 0, int micro_batches = 1, int shares = 1);
  MicroBatch train_batch(int64_t step, int index) override;
  int64_t validation_batches() const override { return validation_; }
  MicroBatch validation_batch(int64_t i) override;

 private:
  MicroBatch draw(uint64_t seed, int64_t first_id) const;
  at::Tensor example(int64_t id) const;  // seq_len + 1 tokens of pooled example `id`
  int64_t batch_, seq_len_, vocab_;
  uint64_t seed_;
  int64_t validation_;
  int64_t pool_;
  int micro_batches_;
  int shares_;
};

}  // namespace actkit::pipeline
