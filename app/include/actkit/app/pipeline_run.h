// One rank of `actkit pipeline`: pipeline-parallel training of a language
// model, one process per stage (and per replica with data parallelism
// across pipelines), with compressed stage boundaries. Every rank calls
// run_pipeline_rank with the same config; rank 0 gets the run's results.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actkit/app/run_progress.h"
#include "actkit/app/run_spec.h"
#include "actkit/comm/group_config.h"
#include "actkit/optim/data_parallel_optimizer.h"
#include "actkit/optim/local_optimizer.h"
#include "actkit/optim/optimizer_choice.h"
#include "actkit/pipeline/pipeline_config.h"
#include "actkit/pipeline/stage_reports.h"

namespace actkit::app {

struct PipelineRunConfig {
  // The model (a zoo language model, or a Hugging Face folder's; init may
  // also be a state-dict file or a --save folder to start from), the data
  // (text), the level, the rate (peak 3e-4, constant by default, as the
  // pipeline's fidelity runs were made), the seed (1), the run's length and
  // the checkpoint: `save` a folder for each stage's checkpoint (also every
  // checkpoint.save_every steps), `resume` the run such a folder holds (`init` then
  // may only name the Hugging Face folder it started from, and
  // resolve_pipeline_model finds that folder again when it is left out),
  // `save_hf` (with a Hugging Face folder as init, and `save`) the trained
  // model read back from the checkpoint, as a folder.
  RunSpec run = default_run_spec(RunCommand::kPipeline);
  // The split, the schedule, the codecs, the links (rates of 0 where tc
  // shapes them), the stage optimizer. Its model, shape, rate, weight
  // decay, seed and level are the run spec's (stage_config). buffers.dir
  // empty: aqsgd keeps m(ξ) in resume/buffers, else in save/buffers, else
  // in a temporary directory of the rank's own, removed at the end.
  pipeline::PipelineConfig pipeline;
  int64_t validation_batches = 8;
  // Epochs whose activations cross in full precision (unset: 1 for aqsgd,
  // as the paper; 0 for the other codecs).
  std::optional<double> warmup_epochs;
  // Each stage's optimizer (pipeline.replicas == 1).
  optim::LocalOptimizer stage_optimizer = optim::LocalOptimizer::kAdamW;
  // pipeline.replicas > 1: the optimizer across the replicas of a stage
  // and its 1-bit warm-up (steps >= 0, else that fraction of the run).
  optim::OptimizerChoice replica_optimizer;
  int64_t replica_warmup_steps = -1;
  double replica_warmup_fraction = 0.167;
  double first_link_bps = 0;  // the first boundary's rate, as reported (0: unlimited)
  GroupConfig group;          // this rank, the rendezvous, the timeout, the backend

  // Throws InvalidInput naming the first setting out of range (also what
  // PipelineConfig::validate checks). The model is resolved
  // (resolve_pipeline_model) first: this reads no file. The CLI calls it
  // before any rank starts, so a typo fails once.
  void validate() const;
};

// The stage settings of `config`: config.pipeline with the run spec's
// model, shape, peak rate, weight decay, seed and level, and the name of
// the optimizer the stages make.
pipeline::PipelineConfig stage_config(const PipelineRunConfig& config);

// Where a pipeline run started from, recorded in every checkpoint it saves
// (step-<N>/origin.json): the Hugging Face folder given as --init, with its
// config.json, so that a resumed run builds the same model and tokenizer.
// Resolves config.run.model (app::resolve_model: a folder's config.json,
// read once), for config.run.checkpoint.resume first filling in the folder
// from the checkpoint when init is empty. Throws InvalidInput when `init`
// is another model's folder than the checkpoint's, when the recorded
// folder is gone or changed, or when `init` is a folder for a checkpoint
// that did not start from one; FormatError for a malformed record.
void resolve_pipeline_model(PipelineRunConfig& config);

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
  std::vector<Evaluation> evaluations;  // every run.eval_every steps, then the final one
  double step_time_s = 0, tokens_per_s = 0, run_s = 0;
  std::vector<pipeline::LinkReport> links;     // merged per direction, forward first
  std::vector<pipeline::StageSummary> stages;  // replica 0's, stage order
  int64_t boundary_bytes = 0, fp32_bytes = 0;  // over every link
  int64_t tied_bytes = 0;
  int64_t exchange_bytes = 0;           // replicas: what replica 0's stages' optimizers sent
  optim::ExchangeStats stage0_exchange;  // replicas: stage 0's optimizers together
  int64_t warmup_steps = 0;  // steps whose activations crossed in full precision
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
