// Everything that crosses a stage's boundaries, in both directions: the
// activations it sends to stage + 1 and receives from stage - 1 (plain,
// every message through the forward codec, or AQ-SGD, deltas against m(ξ)
// kept on both sides of each boundary), the gradients going back through
// the backward codec (with error feedback when asked), and the tied
// embedding's gradient between the stages that share it. The boundaries
// own the codec pair, the residuals of error feedback, the rounding seeds
// and the byte counts of the reports; the stage runner only runs the
// schedule's actions.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actkit/comm/communicator.h"
#include "actkit/pipeline/error_feedback.h"
#include "actkit/pipeline/pipeline_config.h"
#include "actkit/pipeline/stage_reports.h"

namespace actkit::pipeline {

// Where stage `stage` of replica `replica` is and what its messages' seeds are.
struct StagePosition {
  int stage = 0, replica = 0;
  bool first() const { return stage == 0; }
  bool last(const PipelineConfig& c) const { return stage == c.stages - 1; }
};

// What a rounding seed is for.
enum class SeedKind : uint64_t {
  kActivations = 0,
  kGradients = 1,
  kTiedGradient = 2,
  kBufferRounding = 3,  // aqsgd: the rounding of m(ξ)'s update, the same on both sides of a boundary
};
// The rounding seed of one message: distinct for every message of the run,
// the same on a re-run. `stage` is the sender's (for kBufferRounding, the
// boundary's sender, so that both sides draw alike); validation batch i is
// step -1 - i.
uint64_t message_seed(const PipelineConfig& config, int stage, int replica, int64_t step, int micro_batch,
                      SeedKind kind);
// "boundary 1->2", for messages.
std::string boundary_name(int from, int to);
// "micro-batch 1, step 7", for messages.
std::string micro_batch_name(int64_t step, int micro_batch);
// The largest payload a boundary message of this pipeline may announce.
int64_t boundary_limit(const PipelineConfig& config);

class StageBoundaries {
 public:
  // The kind config.forward_codec calls for. aqsgd opens its stores (at
  // `resume_step` >= 0: reopens them at that step) and compares them with
  // the other side of each boundary; a store that fails to open is
  // reported to the other side too, so both fail with the reason. Throws
  // CommError when the sides disagree, Error as ExampleStore does.
  static std::unique_ptr<StageBoundaries> make(Communicator& comm, const PipelineConfig& config,
                                               const StagePosition& at, int64_t resume_step);
  virtual ~StageBoundaries() = default;

  // Whether send/receive use the micro-batch's example ids (aqsgd).
  virtual bool needs_example_ids() const { return false; }
  // Before a training step's messages: announces what it receives (the
  // activations from stage - 1, the gradients from stage + 1, and what the
  // kind adds).
  virtual void begin_step(int micro_batches);
  // Reads ahead what the examples `ids` will need.
  virtual void prefetch(const std::vector<int64_t>& /*ids*/) {}

  // Training: sends activation `y` of micro-batch `micro_batch` of `step`
  // (examples `ids`) to stage + 1; receives stage - 1's as a float tensor of
  // (micro-batch size, sequence, hidden). Throws FormatError for a payload
  // that does not decode, CommError when the two sides' m(ξ) differ
  // (with config.buffers.check).
  void send(const at::Tensor& y, const std::vector<int64_t>& ids, int64_t step, int micro_batch);
  virtual at::Tensor receive(const std::vector<int64_t>& ids, int64_t step, int micro_batch) = 0;

  // Validation batch `i`: held-out examples, first sight, so aqsgd sends
  // them in full precision; the others use the forward codec.
  void send_validation(const at::Tensor& y, int64_t i);
  at::Tensor receive_validation(int64_t i);

  // The gradient of micro-batch `micro_batch`'s input, to stage - 1,
  // through the backward codec (with config.backward_feedback, plus the
  // residual this slot kept, which is then renewed).
  void send_gradient(const at::Tensor& g, int64_t step, int micro_batch);
  // The gradient of this stage's output from stage + 1, of `shape`. Throws
  // FormatError for a payload that does not decode or has another shape.
  at::Tensor receive_gradient(int64_t step, int micro_batch, const std::vector<int64_t>& shape);

  // The tied parameters' gradients (`shared`: each name with the stages
  // holding it; `named`: this stage's parameters): every owner sends its
  // gradient with the backward codec (fp32, or with error feedback, as
  // config.tied_gradient says) and sums what every owner sent, its own
  // included as the others decode it, in stage order, into the parameter's
  // grad: all owners then step with the same bits.
  void exchange_tied_gradients(int64_t step, const std::vector<std::pair<std::string, std::vector<int>>>& shared,
                               const torch::OrderedDict<std::string, at::Tensor>& named);

  // The residuals error feedback keeps (boundary and tied gradients), for
  // the stage checkpoint, and putting them back on resume.
  const std::map<std::string, at::Tensor>& residuals() const { return feedback_.residuals(); }
  void restore_residuals(std::map<std::string, at::Tensor> residuals) { feedback_.restore(std::move(residuals)); }

  // Checkpoints what this side keeps at `steps` (aqsgd: both sides of every
  // boundary save, then compare). Every rank must call it.
  virtual void checkpoint(int64_t /*steps*/) {}

  // Traffic on the links this rank sends on, with what it would have been
  // in fp32, and the waits on the links into it.
  std::vector<LinkReport> link_reports() const;
  // Adds what this side sent of the tied gradients, and keeps (aqsgd's
  // stores), to `summary`.
  virtual void add_to(StageSummary& summary) const;

 protected:
  StageBoundaries(Communicator& comm, const PipelineConfig& config, const StagePosition& at)
      : comm_(comm), config_(config), at_(at) {}
  // The kind's own sending of training activations.
  virtual void send_activations(const at::Tensor& y, const std::vector<int64_t>& ids, int64_t step,
                                int micro_batch) = 0;
  // The payload from stage - 1 on kActivations.
  std::vector<uint8_t> receive_bytes(const std::string& which);
  std::vector<int64_t> activation_shape() const;
  uint64_t seed(int64_t step, int micro_batch, SeedKind kind) const {
    return message_seed(config_, at_.stage, at_.replica, step, micro_batch, kind);
  }

  Communicator& comm_;
  const PipelineConfig& config_;
  StagePosition at_;

 private:
  ErrorFeedback feedback_;
  int64_t raw_forward_bytes_ = 0, raw_backward_bytes_ = 0, tied_bytes_ = 0;
};

}  // namespace actkit::pipeline
