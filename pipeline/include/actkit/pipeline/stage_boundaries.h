// How a stage's activations cross its two boundaries (toward stage + 1,
// from stage - 1): plain, every message through the forward codec, or
// AQ-SGD, deltas against m(ξ) kept on both sides of each boundary. The
// stage runner sees one send and one receive either way. Gradients always
// go back through the backward codec (StageRunner).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actkit/comm/communicator.h"
#include "actkit/pipeline/pipeline_config.h"
#include "actkit/pipeline/stage_reports.h"

namespace actkit::pipeline {

// Where stage `stage` of replica `replica` is and what its messages' seeds are.
struct StagePosition {
  int stage = 0, replica = 0;
  bool first() const { return stage == 0; }
  bool last(const PipelineConfig& c) const { return stage == c.stages - 1; }
};

// The rounding seed of one message: distinct for every message of the run
// (direction 0: activations, 1: gradients, 2: a shared parameter's
// gradient), the same on a re-run.
uint64_t rounding_seed(const PipelineConfig& config, const StagePosition& at, int64_t step, int micro_batch,
                       int direction);
// "boundary 1->2", for messages.
std::string boundary_name(int from, int to);
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
  // Before a training step's messages: announces what it receives besides
  // the activations (which the runner announces).
  virtual void begin_step(int /*micro_batches*/) {}
  // Reads ahead what the examples `ids` will need.
  virtual void prefetch(const std::vector<int64_t>& /*ids*/) {}

  // Training: sends activation `y` of micro-batch `micro_batch` of `step`
  // (examples `ids`) to stage + 1; receives stage - 1's as a float tensor of
  // (micro-batch size, sequence, hidden). Throws FormatError for a payload
  // that does not decode, CommError when the two sides' m(ξ) differ
  // (with config.buffers.check).
  virtual void send(const at::Tensor& y, const std::vector<int64_t>& ids, int64_t step, int micro_batch) = 0;
  virtual at::Tensor receive(const std::vector<int64_t>& ids, int64_t step, int micro_batch) = 0;

  // Validation batch `i`: held-out examples, first sight, so aqsgd sends
  // them in full precision; the others use the forward codec.
  void send_validation(const at::Tensor& y, int64_t i);
  at::Tensor receive_validation(int64_t i);

  // Checkpoints what this side keeps at `steps` (aqsgd: both sides of every
  // boundary save, then compare). Every rank must call it.
  virtual void checkpoint(int64_t /*steps*/) {}
  // Adds what this side keeps (aqsgd's stores) to `summary`.
  virtual void add_to(StageSummary& /*summary*/) const {}

 protected:
  StageBoundaries(Communicator& comm, const PipelineConfig& config, const StagePosition& at)
      : comm_(comm), config_(config), at_(at) {}
  // The payload from stage - 1 on kActivations.
  std::vector<uint8_t> receive_bytes(const std::string& which);
  std::vector<int64_t> activation_shape() const;

  Communicator& comm_;
  const PipelineConfig& config_;
  StagePosition at_;
};

}  // namespace actkit::pipeline
