#include "actkit/pipeline/synthetic_source.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit::pipeline {

SyntheticSource::SyntheticSource(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, int64_t validation,
                                 int64_t pool, int micro_batches, int shares)
    : batch_(batch), seq_len_(seq_len), vocab_(vocab), seed_(seed), validation_(validation), pool_(pool),
      micro_batches_(micro_batches), shares_(shares) {
  if (batch < 1 || seq_len < 1 || vocab < 2 || validation < 0 || pool < 0 || micro_batches < 1 || shares < 1) {
    throw InvalidInput(c10::str("synthetic data: batch ", batch, ", length ", seq_len, ", vocabulary ", vocab));
  }
  if (pool > 0 && pool < shares) {
    throw InvalidInput(c10::str("synthetic data: a pool of ", pool, " examples cannot be shared by ", shares));
  }
  // Fresh examples draw micro-batch indices 0 .. micro_batches * shares - 1
  // per step: refused here, before any rank trains, rather than at step 0.
  if (pool == 0 && int64_t(micro_batches) * shares > kMaxFreshMicroBatches) {
    throw InvalidInput(c10::str("synthetic data: ", micro_batches, " micro-batches per step on each of ", shares,
                                " replicas need ", int64_t(micro_batches) * shares,
                                " fresh micro-batches a step; without a pool (--train-limit N) at most ",
                                kMaxFreshMicroBatches));
  }
}

MicroBatch SyntheticSource::draw(uint64_t seed, int64_t first_id) const {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor seq = at::randint(0, vocab_, {batch_, seq_len_ + 1}, gen, at::kLong);
  MicroBatch mb;
  mb.inputs = seq.narrow(1, 0, seq_len_).contiguous();
  mb.labels = seq.narrow(1, 1, seq_len_).contiguous();
  for (int64_t i = 0; i < batch_; ++i) mb.example_ids.push_back(first_id + i);
  return mb;
}

at::Tensor SyntheticSource::example(int64_t id) const {
  at::Generator gen = at::detail::createCPUGenerator(seed_ * 7919u + uint64_t(id) * 104729u + 1);
  return at::randint(0, vocab_, {seq_len_ + 1}, gen, at::kLong);
}

MicroBatch SyntheticSource::train_batch(int64_t step, int index) {
  if (step < 0) throw InvalidInput(c10::str("synthetic data: step ", step, " (steps count from 0)"));
  if (pool_ > 0) {
    const SharePosition where = share_position(step, index, micro_batches_, shares_, batch_);
    const int64_t share_pool = pool_ / shares_;
    MicroBatch mb;
    std::vector<at::Tensor> rows;
    for (int64_t i = 0; i < batch_; ++i) {
      const int64_t id = where.share + ((where.first + i) % share_pool) * shares_;
      mb.example_ids.push_back(id);
      rows.push_back(example(id));
    }
    const at::Tensor seq = at::stack(rows);
    mb.inputs = seq.narrow(1, 0, seq_len_).contiguous();
    mb.labels = seq.narrow(1, 1, seq_len_).contiguous();
    return mb;
  }
  // Without a pool every example is new: ids (step * 1024 + index) * batch
  // onwards, distinct while a step has at most 1024 micro-batches.
  if (index < 0 || index >= kMaxFreshMicroBatches) {
    throw InvalidInput(c10::str("synthetic data: micro-batch index ", index, " of a step (indices 0 .. ",
                                kMaxFreshMicroBatches - 1, " without a pool)"));
  }
  const uint64_t s = seed_ * 1000003u + uint64_t(step) * 4099u + uint64_t(index);
  return draw(s, (step * kMaxFreshMicroBatches + index) * batch_);
}

MicroBatch SyntheticSource::validation_batch(int64_t i) {
  if (i < 0 || i >= validation_) throw InvalidInput(c10::str("validation batch ", i, " of ", validation_));
  return draw(~seed_ - uint64_t(i), -1 - i * batch_);
}

}  // namespace actkit::pipeline
