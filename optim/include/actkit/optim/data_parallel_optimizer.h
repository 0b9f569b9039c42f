// The frame of ACTkit's data-parallel optimizers (Adam, LAMB and their
// 1-bit forms, design §4.8): a torch::optim::Optimizer whose step() first
// exchanges what the ranks computed, then updates the parameters.
//
// Two stages. Warm-up: the gradients are averaged over the ranks (fp32, or
// fp16 as LibTorch's FP16_COMPRESS hook does) and the algorithm runs as
// usual. With Exchange::kOneBit the warm-up ends after `warmup_steps`
// steps: the variance freezes, and from then on each rank updates its own
// momentum with its own gradient and the momenta are averaged by the 1-bit
// compressed allreduce (comm/compressed_allreduce.h) instead.
//
// Parameters: every parameter of every group with at least one value takes
// part (empty ones are ignored). In the warm-up a parameter that no rank has
// a gradient for is left alone, as LibTorch's optimizers do; a rank without
// a gradient for a parameter others have contributes zeros. The compression
// stage works on the parameters updated at least once by the freeze, in one fused
// buffer whose layout every rank shares; one of them without a gradient
// later counts as a zero gradient.
//
// Non-finite gradients: if any rank's gradient (or momentum) holds NaN or
// Inf, every rank skips the step, leaving parameters and state untouched;
// skipped_steps() counts them and last_step_skipped() says so.
//
// Checkpoints: save()/load() (torch::save(optimizer, file)) hold every
// piece of state, this rank's errors included, so a run resumed on the
// same ranks continues bit for bit. load() refuses a checkpoint of another
// algorithm, parameter layout, exchange, warm-up or world size.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actkit/comm/communicator.h"
#include "actkit/comm/compressed_allreduce.h"

namespace actkit::optim {

// How the ranks' gradients (or momenta) are averaged.
enum class Exchange {
  kFp32,    // plain allreduce of fp32 gradients
  kFp16,    // gradients divided by N, cast to fp16, summed, cast back (FP16_COMPRESS)
  kOneBit,  // fp32 gradients in the warm-up, then 1-bit momenta
};
std::string to_string(Exchange e);
// "fp32", "fp16", "onebit". Throws InvalidInput for anything else.
Exchange parse_exchange(const std::string& text);

struct ExchangeOptions {
  Communicator* comm = nullptr;  // nullptr: a single process (no exchange)
  Exchange exchange = Exchange::kFp32;
  // kOneBit: steps of the warm-up, at least 1 (the freeze follows step
  // `warmup_steps`).
  // The paper's BERT runs used 16.7% of the run; docs/data-parallel.md.
  int64_t warmup_steps = 0;
  // kOneBit: the back-off. When the averaged 1-bit momentum's norm exceeds
  // this many times its moving average (the warm-up's momentum at the
  // freeze to start with), the step is not applied: the gradients are
  // averaged in fp32 instead, the stage returns to the warm-up for another
  // `warmup_steps` steps and freezes anew. 0: never back off.
  //
  // Why: the frozen variance and coefficient make the step grow with the
  // gradient, so a loss spike right after the freeze feeds itself (one
  // 1-bit LAMB seed in five of the benchmark diverged, or stalled 27 %
  // behind LAMB, in every variant of the 1-bit stage tried; frozen six
  // steps later, past the spike, it ended 4 % behind). 4: the ratio reached
  // 61 at that spike and stays below 1.95 in healthy runs (docs/fidelity.md).
  double backoff_factor = 4;
};

// What the exchange cost so far, on this rank's wire (Communicator's
// ring-algorithm volume; zero for a single process).
struct ExchangeStats {
  int64_t warmup_steps = 0, compressed_steps = 0, skipped_steps = 0;
  int64_t backoffs = 0;  // times the 1-bit stage returned to the warm-up (ExchangeOptions::backoff_factor)
  int64_t warmup_bytes = 0, compressed_bytes = 0;
  double seconds = 0;  // in the exchange, waits for slower ranks included
};

// One parameter tensor's last update, when tracing (trace_updates()).
struct UpdateTrace {
  double coefficient = 0;    // LAMB: the layer-wise scaling c of the step (0 for Adam)
  double ratio = 1;          // 1-bit LAMB: the variance ratio r of the step (1 in the warm-up; 1 for Adam)
  double update_ratio = 0;   // ‖Δx‖ / ‖x‖ of the step (0 for a zero tensor or no update)
};

class DataParallelOptimizer : public torch::optim::Optimizer {
 public:
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  const ExchangeOptions& exchange_options() const { return exchange_; }
  // Steps taken (skipped ones not counted).
  int64_t steps() const { return steps_; }
  bool compressing() const { return frozen_; }
  // The step after which the (next) freeze comes: warmup_steps, moved on by
  // each back-off.
  int64_t freeze_step() const { return freeze_at_; }
  int64_t skipped_steps() const { return stats_.skipped_steps; }
  bool last_step_skipped() const { return last_skipped_; }
  const ExchangeStats& exchange_stats() const { return stats_; }
  // The fused buffer's size in the compression stage (0 before the freeze).
  int64_t fused_numel() const { return fused_numel_; }
  // Facts every rank must share ("name", "value"), for a startup handshake.
  std::vector<std::pair<std::string, std::string>> handshake_facts() const;
  // From now on, record every tensor's relative update of each step (a copy
  // of each parameter per step while on; for studying the freeze).
  void trace_updates(bool on) { trace_ = on; }
  // The last update's trace of every parameter, in group order (zeros
  // before its first traced update; a parameter not updated in a step keeps
  // the values of its last update).
  std::vector<UpdateTrace> last_update_trace() const;
  // Elements masked in the compression stage: those whose averaged gradient
  // was exactly zero at every warm-up step (positions past the sequence
  // length, say). 1-bit coding cannot send their zero, so their momentum is
  // zeroed after each exchange instead of drifting by ±scale.
  int64_t masked_elements() const;

 protected:
  // Per-parameter state of both algorithms; what LAMB alone uses stays
  // undefined for Adam.
  struct State {
    int64_t step = 0;            // updates of this parameter
    int64_t frozen_step = 0;     // its variance updates at the freeze (Adam's bias correction of v_f)
    int64_t variance_steps = 0;  // updates of v: the warm-up steps, a back-off's second warm-up included
    torch::Tensor exp_avg;       // m
    torch::Tensor exp_avg_sq;    // v (frozen from the freeze on)
    torch::Tensor fresh_sq;      // LAMB: the fresh variance of the compression stage
    double c_avg = 0;            // LAMB: moving average of the scaling coefficient (β3)
    double ratio = 1;            // LAMB: r of the last step
    double momentum_scale = 1;   // LAMB: the momentum scale coefficient (§4.3), fixed at the freeze
    double last_coefficient = 0; // LAMB: c of the last step (reported)
    int64_t c_updates = 0;       // LAMB: warm-up coefficients averaged into c_avg (its bias correction)
    torch::Tensor live;          // from the freeze: false where every warm-up gradient was 0 (undefined: none)
    double last_update_ratio = 0;  // ‖Δx‖/‖x‖ of the last update, when tracing
  };
  struct Param {
    torch::Tensor tensor;
    torch::optim::OptimizerOptions* options;  // its group's
    State* state;
  };

  DataParallelOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups,
                        std::unique_ptr<torch::optim::OptimizerOptions> defaults, ExchangeOptions exchange,
                        std::string algorithm);

  // The algorithm: one warm-up update with the averaged gradient; the
  // momentum of one compression step (before the exchange; `m` is where it
  // goes, already in the fused buffer); the update after the exchange with
  // the averaged momentum `m` (state.exp_avg still holds the last one);
  // what happens at the freeze.
  virtual void warmup_update(Param& p, const torch::Tensor& grad) = 0;
  virtual void local_momentum(Param& p, const torch::Tensor& grad, torch::Tensor m) = 0;
  virtual void compressed_update(Param& p, const torch::Tensor& m) = 0;
  virtual void freeze(std::vector<Param>& params) = 0;

  // Every parameter's state, in group order (empty parameters included).
  const std::vector<std::unique_ptr<State>>& states() const { return states_; }

 private:
  std::vector<Param> all_params();
  bool warmup_step(std::vector<Param>& params);
  // 1 stepped, 0 skipped (non-finite), -1 backed off (nothing applied).
  int compressed_step(std::vector<Param>& params);
  void freeze_now(std::vector<Param>& params);
  void back_off();

  ExchangeOptions exchange_;
  std::string algorithm_;
  std::vector<std::unique_ptr<State>> states_;  // one per parameter, in group order
  int64_t steps_ = 0;
  bool frozen_ = false;
  bool last_skipped_ = false;
  std::vector<int64_t> layout_;  // compression stage: indices of the fused parameters
  int64_t fused_numel_ = 0;
  int64_t freeze_at_ = 0;           // exchange_.warmup_steps, moved on by back-offs
  double momentum_norm_avg_ = 0;    // compression stage: moving average of the averaged momentum's norm
  std::unique_ptr<CompressedAllreduce> allreduce_;
  ExchangeStats stats_;
  bool trace_ = false;
};

}  // namespace actkit::optim
