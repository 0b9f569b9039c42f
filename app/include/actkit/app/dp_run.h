// One worker of `actkit dp`: data-parallel training of a zoo model, one
// process per worker, with Adam or LAMB exchanging fp32 or fp16 gradients
// or, after a warm-up, 1-bit momenta (optim/). Every worker calls
// run_dp_worker with the same config; rank 0 gets the run's results.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actkit/app/run_progress.h"
#include "actkit/app/run_spec.h"
#include "actkit/comm/group_config.h"
#include "actkit/comm/link_spec.h"
#include "actkit/core/level.h"
#include "actkit/optim/data_parallel_optimizer.h"
#include "actkit/optim/optimizer_choice.h"

namespace actkit::app {

// The most micro-batches a worker accumulates per step (a bound for the flag,
// far above the 32K-64K global batches of 1-bit LAMB's paper at any batch).
constexpr int64_t kMaxAccumulate = 4096;

struct DpRunConfig {
  // The model, the data, the level, the rate (peak 1e-3 by default), the
  // seed (weights, data order, rounding), the run's length, and the
  // checkpoint: `save` a folder for the model and every rank's optimizer
  // state at the end, `resume` the run such a folder holds, `save_hf` (with
  // a Hugging Face folder as init) rank 0's trained model as a folder.
  RunSpec run = default_run_spec(RunCommand::kDp);
  optim::OptimizerChoice optimizer{optim::Algorithm::kAdam, optim::Exchange::kOneBit};
  int64_t warmup_steps = -1;        // 1-bit: steps before the freeze (-1: warmup_fraction of the run)
  double warmup_fraction = 0.167;   // the paper's BERT seqlen-128 run: 1000 of 5993 steps
  int64_t batch = 64;               // examples per worker and micro-batch
  // Micro-batches per worker and step (gradient accumulation): a step's
  // global batch is workers · batch · accumulate examples, one exchange.
  int64_t accumulate = 1;
  // Rank 0 records each step's c, r and ‖Δx‖/‖x‖ of every tensor
  // (DpRunResult::trace; a copy of the parameters per step).
  bool trace_updates = false;
  LinkMode link = LinkMode::kProcess;
  LinkSpec egress;                  // each worker's link (rate 0 where tc shapes it)
  GroupConfig group;                // this rank, the rendezvous, the timeout, the backend

  // Throws InvalidInput naming the first setting out of range. The model is
  // resolved (resolve_model) first: this reads no file.
  void validate() const;
};

// When training starts, on rank 0.
struct DpStart {
  int workers = 0;
  int64_t train_examples = 0;
  int64_t first_step = 0, steps = 0, warmup_steps = 0;
  // False after resuming from a checkpoint without the level's state.
  bool controller_state_restored = true;
  std::string checkpoint;  // the optimizer file resumed from (empty: none)
};

struct DpCallbacks {
  std::function<void(const DpStart&)> on_start;     // rank 0
  std::function<void(const StepProgress&)> on_step;  // rank 0, after each step
  // Every rank, after each evaluation batch of its own (done of total):
  // the ranks share the evaluation, each a disjoint part of the split.
  std::function<void(int64_t done, int64_t total)> on_evaluate;
};

// What rank 0 knows at the end (other ranks: leader false).
struct DpRunResult {
  bool leader = false;
  DpStart start;
  bool text = false;                 // a language model: evaluation is a loss, else an accuracy
  std::vector<double> train_losses;  // per step run, the mean over the workers
  double final_train_loss = 0;       // mean over the last epoch's steps (at most)
  double evaluation = 0;             // validation loss or test accuracy, on rank 0's model
  std::vector<Evaluation> evaluations;  // every run.eval_every steps, then the final one
  double run_s = 0, samples_per_s = 0;  // of the training loop, its evaluations (run.eval_every) left out
  double warmup_step_s = 0, compressed_step_s = 0;  // mean step, each stage's first excluded
  optim::ExchangeStats exchange;     // rank 0's
  int64_t masked_elements = 0;       // momentum elements zeroed in the 1-bit stage (no warm-up gradient)
  // With trace_updates: the parameters' names, and per step run its rate,
  // whether it was compressed, and every parameter's trace.
  struct TracedStep {
    int64_t step = 0;
    double lr = 0;
    bool compressing = false;
    std::vector<optim::UpdateTrace> tensors;
  };
  std::vector<std::string> parameter_names;
  std::vector<TracedStep> trace;
  // Per step of each stage of the exchange, rank 0's bytes.
  int64_t warmup_bytes_per_step() const;
  int64_t compressed_bytes_per_step() const;
};

// Forms the group, trains, saves, evaluates. Throws InvalidInput for a bad
// config or a checkpoint with nothing left to do, CommError naming a rank
// that failed, disagreed or timed out, FormatError for an unreadable
// checkpoint.
DpRunResult run_dp_worker(const DpRunConfig& config, const DpCallbacks& callbacks = {});

// The results as `actkit dp --json` writes them.
nlohmann::json to_json(const DpRunConfig& config, const DpRunResult& result);
// The trace as `actkit dp --optimizer-trace` writes it: {"parameters":
// [names], "steps": [{"step", "lr", "compressing", "c": [..], "r": [..],
// "update_ratio": [..]}]}, one entry of each list per parameter.
nlohmann::json trace_json(const DpRunResult& result);

}  // namespace actkit::app
