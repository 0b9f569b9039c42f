// One rank of a pipeline: the pieces of the model it owns, the schedule it
// runs, the boundaries it encodes and decodes, its optimizer. Every rank
// constructs one with the same PipelineConfig and calls the same methods in
// the same order; the messages between them follow from that.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/comm/communicator.h"
#include "actkit/pipeline/batch_source.h"
#include "actkit/pipeline/pipeline_config.h"
#include "actkit/pipeline/stage_boundaries.h"
#include "actkit/pipeline/stage_checkpoint.h"
#include "actkit/pipeline/stage_model.h"
#include "actkit/pipeline/stage_reports.h"

namespace actkit::pipeline {

// What rank 0 knows after a step.
struct StepReport {
  double loss = 0;     // mean training loss over the step's micro-batches
  double seconds = 0;  // wall time of the step on this rank
};

// Data parallelism across pipelines (PipelineConfig::replicas > 1): this
// pipeline is replica `index` of `replicas`; the communicator a StageRunner
// is given then holds this replica's stages only (ranks 0..stages-1), and
// the optimizers average what the replicas of a stage computed.
struct Replication {
  int index = 0;
  // Makes the optimizer of some of this stage's parameters (required;
  // config.optimizer names what it makes: optim/ is where optimizers are
  // made, and pipeline/ does not include it). With `exchanges`, it must
  // average gradients (or momenta) over the replicas of this stage (the
  // caller's exchange), so that every replica keeps the same weights, and
  // the runner calls it once for the parameters this stage shares with
  // another stage (GPT-2's tied embedding), when it has any, and once for
  // the rest: every stage holding a shared parameter then exchanges exactly
  // the same values and its copies stay equal bit for bit, whatever the
  // exchange (a 1-bit one included). Without: once, for every parameter.
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)> make_optimizer;
  bool exchanges = false;  // required when config.replicas > 1
  // What the optimizers' exchanges put on this rank's wire so far (bytes),
  // for the reports; unset: 0.
  std::function<int64_t()> exchange_bytes;
};

class StageRunner {
 public:
  // `replication` makes the optimizers; with config.replicas > 1 the data
  // source must be this replica's share, and the checkpoint holds one
  // optimizer file per replica: see save().
  //
  // Builds the model (seeded with config.seed, so every rank has the same
  // initial weights), loads `init` if given (a state-dict file, or a
  // directory of them written by save()), converts it to the level, keeps
  // this rank's pieces and their parameters, and checks with the other
  // ranks that the configuration agrees. With `resume`, `init` must be a
  // directory save() wrote with this many stages: the optimizer state and
  // the aqsgd buffers come back too, and training continues at
  // start_step() exactly as if it had not stopped. Throws InvalidInput for
  // a bad config, CommError when the ranks (or the two sides of a
  // boundary's buffers) disagree or one is missing, FormatError for an
  // unreadable checkpoint. `initial` (may be null; not with `resume`): the
  // first weights by name, read by the caller (see StageModel).
  StageRunner(Communicator& comm, const PipelineConfig& config, BatchSource& data, Replication replication,
              const std::string& init = "", bool resume = false,
              const std::map<std::string, at::Tensor>* initial = nullptr);
  ~StageRunner();

  int stage() const { return at_.stage; }
  int replica() const { return at_.replica; }
  int64_t start_step() const { return start_step_; }
  // False after a resume from a checkpoint saved before checkpoints held
  // the level's controller state: the level then started afresh.
  bool controller_state_restored() const { return controller_state_restored_; }
  bool first() const { return at_.first(); }
  bool last() const { return at_.last(config_); }
  const std::vector<int>& bounds() const { return model_->bounds(); }
  const std::vector<ModelPiece>& pieces() const { return model_->pieces(); }

  // One training step at learning rate `lr`: the schedule's forwards and
  // backwards over config.micro_batches micro-batches, the shared-parameter
  // gradient exchange, the optimizer step. On rank 0 the report carries the
  // step's loss (sent by the last stage).
  StepReport train_step(int64_t step, double lr);

  // Forward only, through the same boundary codec, over this replica's
  // share of the source's validation batches: batch i is replica
  // (i mod replicas)'s, so replicas (which hold the same weights) share the
  // work and none waits for another's. On stage 0: every batch's mean loss
  // at its index, 0 for the other replicas' batches (the replicas' vectors
  // summed are every batch's loss, exactly); elsewhere an empty vector.
  // `on_batch(done, total)` after each of this rank's batches.
  std::vector<double> validation_losses(const std::function<void(int64_t, int64_t)>& on_batch = {});

  // Checkpoints this stage after `steps` training steps to `dir`
  // (StageCheckpoint: parameters, optimizer state, step count, the level's
  // state) and its aqsgd buffers (both sides of a boundary at the same
  // step, then compared). Every rank must call it.
  // Throws Error if it cannot be written, CommError if a boundary's two
  // sides disagree.
  void save(const std::string& dir, int64_t steps);

  // This stage's parameters by full name (what save() writes).
  torch::OrderedDict<std::string, at::Tensor> named_parameters() const;

  // Traffic on the links this rank sends on, and this rank's summary.
  std::vector<LinkReport> link_reports() const;
  StageSummary summary() const;

  // Collects every rank's link reports and summary on rank 0 (a no-op
  // returning empty lists elsewhere). Every rank must call it.
  std::pair<std::vector<LinkReport>, std::vector<StageSummary>> gather_reports();

 private:
  // The forward of micro-batch `index`: its input from the data (stage 0)
  // or stage - 1, this stage's pieces, then the loss (the last stage,
  // divided by `loss_divisor`) or the activations sent to stage + 1. Training
  // (`step` >= 0) and validation (`step` < 0: validation batch `index`)
  // share it. Returns (input, output); the input requires grad in training.
  std::pair<at::Tensor, at::Tensor> forward(int64_t step, int64_t index, double loss_divisor);
  void backward(int64_t step, int micro_batch, const at::Tensor& input, const at::Tensor& output);
  void prefetch_buffers(int64_t step, int micro_batch);
  void make_optimizers();

  Communicator& comm_;
  PipelineConfig config_;
  BatchSource& data_;
  StagePosition at_;
  std::unique_ptr<StageModel> model_;
  // One, or with Replication::exchanges one for the shared parameters and
  // one for the rest.
  StageOptimizers optimizers_;
  Replication replication_;
  StageCheckpoint checkpoint_;
  // Everything that crosses this stage's boundaries, both directions.
  std::unique_ptr<StageBoundaries> boundaries_;
  int64_t start_step_ = 0;
  bool controller_state_restored_ = true;
  ScopedCpuTracking memory_;
};

}  // namespace actkit::pipeline
