// Everything that must be the same on every rank of a pipeline: the model
// and its split, the schedule, the boundary codecs, the level, the
// optimizer. Each rank builds it from the same command line; the startup
// handshake compares facts() across ranks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actkit/comm/link_spec.h"
#include "actkit/core/level.h"
#include "actkit/models/zoo.h"
#include "actkit/pipeline/aqsgd_boundary.h"
#include "actkit/pipeline/boundary_codec.h"
#include "actkit/pipeline/schedule.h"
#include "actkit/pipeline/stage_split.h"

namespace actkit::pipeline {

// How the gradient of a parameter two stages share (GPT-2's tied
// embedding) travels between them.
enum class TiedGradient {
  kCodec,     // through the backward codec, as a boundary gradient
  kFeedback,  // through the backward codec with error feedback (ErrorFeedback)
  kFp32,      // uncompressed
};
const char* to_string(TiedGradient tied);  // "codec", "feedback", "fp32"
// Throws InvalidInput naming the accepted values.
TiedGradient parse_tied_gradient(const std::string& name);

// The most micro-batches of a step: each has its schedule entries, boundary
// buffers and reports on every stage, allocated before the first step. GPipe
// and 1F1B run 4-128 (GPipe's paper: up to 32 per step); 4096 is far above
// any schedule's use and bounds that bookkeeping.
constexpr int kMaxMicroBatches = 4096;

struct PipelineConfig {
  std::string model = "gpt2";
  ModelOptions model_options;  // vocab_size 256 and max_positions = seq_len for the byte corpus
  int64_t seq_len = 128;
  int stages = 2;
  int micro_batches = 4;
  int64_t micro_batch_size = 4;
  Schedule schedule = Schedule::k1F1B;
  int in_flight = 0;  // 1F1B: micro-batches stage 0 may hold (0 = stages; see stage_ops)
  BoundaryCodec forward_codec;   // activations, stage s -> s + 1
  BoundaryCodec backward_codec;  // gradients, stage s + 1 -> s
  // Error feedback on the boundary gradients: each sender keeps one
  // residual per micro-batch of the step (ErrorFeedback).
  bool backward_feedback = false;
  TiedGradient tied_gradient = TiedGradient::kCodec;
  // Steps whose activations cross in full precision whatever the codec:
  // AQ-SGD's warm-up (its buffers fill then), and for the other codecs the
  // control that gives them the same exact start (docs/fidelity.md).
  int64_t warmup_steps = 0;
  BufferOptions buffers;         // aqsgd: where and how m(ξ) is kept (its warmup_steps: the one above)
  LevelConfig level;             // activation compression inside each stage
  BalanceBy balance = BalanceBy::kParameters;
  // Data-parallel copies of the whole pipeline (`actkit pipeline --dp`):
  // replica r runs stage s as rank r·stages + s, on its own share of the data.
  int replicas = 1;
  // The name of what the caller's Replication::make_optimizer makes
  // ("adamw", "sgd", "onebit-adam", ...), compared across ranks and
  // checkpoints with its rate and weight decay below.
  std::string optimizer = "adamw";
  double lr = 3e-4;
  double weight_decay = 0.01;
  uint64_t seed = 1;
  // Emulated links, one per boundary (stages - 1 of each; empty: unlimited).
  std::vector<LinkSpec> forward_links, backward_links;
  LinkMode link_mode = LinkMode::kProcess;
  // What else every rank must agree on, as the caller states it: the data,
  // the number of steps and validation batches, ... (compared as text).
  std::string run;

  // Throws InvalidInput naming the first setting out of range.
  void validate() const;
  // Whether a stage keeps error-feedback residuals (checkpoints hold them).
  bool uses_error_feedback() const { return backward_feedback || tied_gradient == TiedGradient::kFeedback; }
  // The settings every rank must agree on, as (name, value) text.
  std::vector<std::pair<std::string, std::string>> facts() const;
};

}  // namespace actkit::pipeline
