// One rank of `actkit pipeline`: pipeline-parallel training of a language
// model, one process per stage (and per replica with data parallelism
// across pipelines), with compressed stage boundaries. Every rank calls
// run_pipeline_rank with the same config; rank 0 gets the run's results.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actkit/app/lr_schedule.h"
#include "actkit/app/run_progress.h"
#include "actkit/data/training_data.h"
#include "actkit/comm/group_config.h"
#include "actkit/optim/data_parallel_optimizer.h"
#include "actkit/optim/optimizer_choice.h"
#include "actkit/pipeline/pipeline_config.h"
#include "actkit/pipeline/stage_reports.h"

namespace actkit::app {

struct PipelineRunConfig {
  // The model, its split, the schedule, the codecs, the level, the links
  // (rates of 0 where tc shapes them), the optimizer and its settings.
  // buffers.dir empty: aqsgd keeps m(ξ) in init/buffers when resuming,
  // else in save/buffers, else in a temporary directory of the rank's own,
  // removed at the end.
  pipeline::PipelineConfig pipeline;
  DataOptions data;  // text; seq_len, vocab and seed are the pipeline's
  int64_t validation_batches = 8;
  int64_t steps = 0;  // or:
  double epochs = 0;  // epochs over the training examples
  // What to start from: a state-dict file, a --save folder (its weights),
  // or a Hugging Face folder (its model, weights and tokenizer).
  std::string init;
  // A --save folder to continue exactly. With it, `init` may only be the
  // Hugging Face folder the run started from (its model and tokenizer; the
  // weights are the checkpoint's); resolve_pipeline_origin fills it in from
  // the checkpoint when it is left empty.
  std::string resume;
  std::string save;     // directory for each stage's checkpoint at the end
  // With a Hugging Face folder as `init` and `save`: rank 0 writes the
  // trained model (read back from the saved checkpoint) here as one.
  std::string save_hf;
  bool save_hf_over_init = false;  // save_hf may be `init` itself (its weights replaced)
  int64_t save_every = 0;  // also checkpoint every N steps
  // The rate's course over the run (pipeline.lr is the peak): constant by
  // default, as the pipeline's fidelity runs were made.
  LrPlan lr_plan{LrSchedule::kConstant, 0};
  double aqsgd_warmup_epochs = 1;  // aqsgd: epochs sent in full precision
  // pipeline.replicas > 1: the optimizer across the replicas of a stage
  // and its 1-bit warm-up (steps >= 0, else that fraction of the run).
  optim::OptimizerChoice replica_optimizer;
  int64_t replica_warmup_steps = -1;
  double replica_warmup_fraction = 0.167;
  bool allow_non_finite = false;  // train on past a NaN or infinite loss
  double first_link_bps = 0;  // the first boundary's rate, as reported (0: unlimited)
  GroupConfig group;          // this rank, the rendezvous, the timeout, the backend

  // Throws InvalidInput naming the first setting out of range (also what
  // PipelineConfig::validate checks). The CLI calls it before any rank
  // starts, so a typo fails once.
  void validate() const;
};

// Where a pipeline run started from, recorded in every checkpoint it saves
// (step-<N>/origin.json): the Hugging Face folder given as --init, with its
// config.json, so that a resumed run builds the same model and tokenizer.
// Before any rank starts, for `config.resume`: fills in `config.init` from
// the checkpoint when it is empty and the checkpoint records a folder;
// throws InvalidInput when `init` is another model's folder than the
// checkpoint's, when the recorded folder is gone or changed, or when `init`
// is given for a checkpoint that did not start from a Hugging Face folder;
// FormatError for a malformed record. Nothing for a run without `resume`.
void resolve_pipeline_origin(PipelineRunConfig& config);

// When the run starts, on every rank.
struct PipelineStart {
  int stage = 0, replica = 0;
  std::vector<int> bounds;  // stage s runs pieces [bounds[s], bounds[s + 1])
  int64_t first_step = 0, steps = 0;
  int64_t replica_warmup_steps = 0;
  // False after resuming from a checkpoint without the level's state.
  bool controller_state_restored = true;
};

struct PipelineCallbacks {
  std::function<void(const PipelineStart&)> on_start;  // every rank
  std::function<void(const StepProgress&)> on_step;    // rank 0, after each step
  // Every rank, after each validation batch of its own (done of total).
  std::function<void(int64_t done, int64_t total)> on_validate;
};

// aqsgd: the m(ξ) stores of every stage, together.
struct BufferTotals {
  int64_t stored = 0;       // bytes on both sides of every boundary
  int64_t per_example = 0;  // one side's m(ξ) of one example
  int64_t read = 0, written = 0;  // file traffic
  double wait_s = 0;
};
// Where m(ξ) lives under a per-store memory budget: "memory" (-1: none),
// "files" (0) or "both".
const char* buffer_tier(int64_t memory_budget);

// What rank 0 knows at the end (other ranks: leader false, the rest empty).
struct PipelineRunResult {
  bool leader = false;
  PipelineStart start;
  std::vector<double> losses;  // per step run
  double last_loss = 0, val_loss = 0;
  double step_time_s = 0, tokens_per_s = 0, run_s = 0;
  std::vector<pipeline::LinkReport> links;     // merged per direction, forward first
  std::vector<pipeline::StageSummary> stages;  // replica 0's, stage order
  int64_t boundary_bytes = 0, fp32_bytes = 0;  // over every link
  int64_t tied_bytes = 0;
  int64_t exchange_bytes = 0;           // replicas: what replica 0's stages' optimizers sent
  optim::ExchangeStats stage0_exchange;  // replicas: stage 0's optimizers together
  int64_t aqsgd_warmup_steps = 0;
  BufferTotals buffers;
  double compression_ratio() const { return boundary_bytes > 0 ? double(fp32_bytes) / double(boundary_bytes) : 1.0; }
};

// Forms the group, trains, validates, saves, and gathers the reports.
// Throws InvalidInput for a bad config or a checkpoint with nothing left
// to do, CommError naming a rank that failed, disagreed or timed out,
// FormatError for an unreadable checkpoint.
PipelineRunResult run_pipeline_rank(const PipelineRunConfig& config, const PipelineCallbacks& callbacks = {});

// The results as `actkit pipeline --json` writes them.
nlohmann::json to_json(const PipelineRunConfig& config, const PipelineRunResult& result);

}  // namespace actkit::app
