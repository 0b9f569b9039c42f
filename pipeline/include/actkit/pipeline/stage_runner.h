// One rank of a pipeline: the pieces of the model it owns, the schedule it
// runs, the boundaries it encodes and decodes, its optimizer. Every rank
// constructs one with the same PipelineConfig and calls the same methods in
// the same order; the messages between them follow from that.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/comm/communicator.h"
#include "actkit/converters/convert.h"
#include "actkit/pipeline/batch_source.h"
#include "actkit/pipeline/pipeline_config.h"

namespace actkit::pipeline {

// Message channels between stages.
enum Channel : int {
  kActivations = 0,  // stage s -> s + 1
  kGradients = 1,    // stage s + 1 -> s
  kTiedGradients = 2,  // between the stages that share a parameter
  kReports = 3,      // to rank 0: losses and the end-of-run summary
  kBufferChecks = 4,  // aqsgd: the two sides of a boundary compare their m(ξ)
};

// What rank 0 knows after a step.
struct StepReport {
  double loss = 0;        // mean training loss over the step's micro-batches
  double seconds = 0;     // wall time of the step on this rank
};

// One directed link's traffic over the whole run.
struct LinkReport {
  int from = 0, to = 0;
  bool forward = true;
  int64_t bytes = 0;       // sent, size headers included
  double wait_seconds = 0;  // the receiver's time blocked on it
  int64_t raw_bytes = 0;    // what fp32 would have sent for the same tensors
};

struct StageSummary {
  int stage = 0;
  int first_piece = 0, end_piece = 0;
  int64_t parameters = 0;
  int64_t peak_memory_bytes = 0;
  int64_t tied_bytes = 0;  // sent to exchange a shared parameter's gradient (GPT-2's tied embedding)
  // aqsgd: this stage's buffer stores (one per boundary side it holds), summed.
  int64_t buffer_bytes_stored = 0;
  int64_t buffer_bytes_per_example = 0;  // one side's m(ξ) of one example
  int64_t buffer_bytes_read = 0, buffer_bytes_written = 0;  // file traffic
  double buffer_wait_seconds = 0;
  int64_t exchange_bytes = 0;  // replicas: what the optimizers' exchanges sent (Replication::exchange_bytes)
};

// Data parallelism across pipelines (PipelineConfig::replicas > 1): this
// pipeline is replica `index` of `replicas`; the communicator a StageRunner
// is given then holds this replica's stages only (ranks 0..stages-1), and
// the optimizers average what the replicas of a stage computed.
struct Replication {
  int index = 0;
  // Makes the optimizer of some of this stage's parameters; it must
  // average gradients (or momenta) over the replicas of this stage (the
  // caller's exchange), so that every replica keeps the same weights. The
  // runner calls it once for the parameters this stage shares with another
  // stage (GPT-2's tied embedding), when it has any, and once for the rest:
  // every stage holding a shared parameter then exchanges exactly the same
  // values and its copies stay equal bit for bit, whatever the exchange
  // (a 1-bit one included). Unset: AdamW or SGD (config.optimizer), and
  // config.replicas must be 1.
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)> make_optimizer;
  // What the optimizers' exchanges put on this rank's wire so far (bytes),
  // for the reports; unset: 0.
  std::function<int64_t()> exchange_bytes;
};

class StageRunner {
 public:
  // With `replication` (config.replicas > 1, or an optimizer of the
  // caller's) the data source must be this replica's share, and the
  // checkpoint holds one optimizer file per replica: see save().
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
  // unreadable checkpoint.
  StageRunner(Communicator& comm, const PipelineConfig& config, BatchSource& data, const std::string& init = "",
              bool resume = false, Replication replication = {});
  ~StageRunner();

  int stage() const { return stage_; }
  int replica() const { return replication_.index; }
  int64_t start_step() const { return start_step_; }
  // False after a resume from a checkpoint saved before checkpoints held
  // the level's controller state: the level then started afresh.
  bool controller_state_restored() const { return controller_state_restored_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == config_.stages - 1; }
  const std::vector<int>& bounds() const { return bounds_; }
  const std::vector<ModelPiece>& pieces() const { return pieces_; }

  // One training step at learning rate `lr`: the schedule's forwards and
  // backwards over config.micro_batches micro-batches, the shared-parameter
  // gradient exchange, the optimizer step. On rank 0 the report carries the
  // step's loss (sent by the last stage).
  StepReport train_step(int64_t step, double lr);

  // Mean loss over the source's validation batches (forward only, through
  // the same boundary codec); the value on rank 0, 0 elsewhere. Replicas
  // hold the same weights: only replica 0 runs it (the others return 0 at
  // once).
  double validate();

  // Checkpoints this stage after `steps` training steps: its parameters to
  // `dir`/stage<s>of<K>.pt (torch.save format, full parameter names; with
  // replicas, replica 0 writes it), its optimizer state and step count to
  // `dir`/optimizer-stage<s>of<K>.pt (with N replicas, one file per replica:
  // optimizer-stage<s>of<K>-replica<r>of<N>.pt, as a 1-bit optimizer's
  // errors are the rank's own), and its aqsgd buffers (both sides of a
  // boundary at the same step, then compared). Every rank must call it.
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
  at::Tensor run_pieces(const at::Tensor& input);
  void exchange_tied_gradients(int64_t step);
  uint64_t rounding_seed(int64_t step, int micro_batch, int direction) const;
  std::string boundary(int from, int to) const;
  uint64_t buffer_seed(int64_t step, int micro_batch, int boundary) const;  // the same on both sides
  void prefetch_buffers(int64_t step, int micro_batch);
  // Both sides of each aqsgd boundary compare their stores' checkpoints.
  // An error text (opening or saving a store failed) is sent in place of
  // the state, so both sides fail with it. Throws CommError.
  void compare_buffer_checkpoints(const std::string& when, const std::string& send_error,
                                  const std::string& recv_error);
  // Reads the optimizer state and step count save() wrote, after checking
  // that they belong with the parameter file beside them and that this
  // run's settings are the saved run's. Throws FormatError.
  void load_optimizer(const std::string& dir);
  void save_buffers(int64_t steps);
  std::string optimizer_file(const std::string& dir) const;
  std::string store_name(int from, int to, const char* side) const;
  int64_t boundary_limit() const;  // most bytes a boundary message may announce

  Communicator& comm_;
  PipelineConfig config_;
  BatchSource& data_;
  int stage_ = 0;
  std::shared_ptr<ZooModel> model_;
  ConvertResult converted_;
  std::vector<ModelPiece> all_pieces_;
  std::vector<ModelPiece> pieces_;  // this stage's
  std::vector<int> bounds_;
  std::vector<std::string> param_names_;
  std::vector<at::Tensor> params_;
  // name -> the stages that use it, for names shared by more than one
  std::vector<std::pair<std::string, std::vector<int>>> shared_;
  // One, or with Replication::make_optimizer one for the shared parameters
  // and one for the rest.
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers_;
  Replication replication_;
  std::unique_ptr<AqsgdBoundary> aq_send_, aq_recv_;  // aqsgd: toward stage + 1, from stage - 1
  int64_t start_step_ = 0;
  bool controller_state_restored_ = true;
  ScopedCpuTracking memory_;
  int64_t raw_forward_bytes_ = 0, raw_backward_bytes_ = 0, tied_bytes_ = 0;
};

}  // namespace actkit::pipeline
